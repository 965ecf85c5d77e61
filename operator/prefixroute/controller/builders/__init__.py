"""Builders: a PrefixRoutedModel's spec in, Kubernetes objects (plain dicts) out.

Pure functions — no client, no clock — so the same spec always renders the same objects,
which is what makes server-side apply idempotent and the spec-hash annotation stable.
"""
