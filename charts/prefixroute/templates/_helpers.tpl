{{/*
Names, labels and the small decisions every template shares.
*/}}

{{- define "prefixroute.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name: "prefixroute" for a release named prefixroute. */}}
{{- define "prefixroute.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The operator's Deployment, ServiceAccount and RBAC objects: prefixroute-operator, as in manifests/. */}}
{{- define "prefixroute.operatorName" -}}
{{- printf "%s-operator" (include "prefixroute.fullname" .) -}}
{{- end -}}

{{- define "prefixroute.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "prefixroute.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "prefixroute.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object the chart renders. */}}
{{- define "prefixroute.labels" -}}
helm.sh/chart: {{ include "prefixroute.chart" . }}
app.kubernetes.io/name: {{ include "prefixroute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: prefixroute
{{- end -}}

{{/* What the operator Deployment selects (immutable: never change between releases). */}}
{{- define "prefixroute.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "prefixroute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "prefixroute.operatorLabels" -}}
{{ include "prefixroute.labels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{/*
Labels the operator puts on the pods it creates (operator/prefixroute/controller/names.py
and builders/meta.py): app.kubernetes.io/name=prefixroute, component engine or router,
managed-by prefixroute-operator. NetworkPolicy and PodMonitors select by them.
*/}}
{{- define "prefixroute.childSelector" -}}
app.kubernetes.io/name: prefixroute
app.kubernetes.io/managed-by: prefixroute-operator
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "prefixroute.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the operator watches every namespace (ClusterRole), else "". */}}
{{- define "prefixroute.clusterwide" -}}
{{- if not .Values.watchNamespaces -}}true{{- end -}}
{{- end -}}

{{/* Namespaces that get the engines' NetworkPolicy, one per line. */}}
{{- define "prefixroute.networkPolicyNamespaces" -}}
{{- range (.Values.networkPolicy.namespaces | default .Values.watchNamespaces) }}
{{ . }}
{{- end -}}
{{- end -}}

{{/* "true" when the Prometheus Operator's API is served (or passed with --api-versions). */}}
{{- define "prefixroute.monitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" -}}true{{- end -}}
{{- end -}}

{{/*
What the operator may do wherever it works: a ClusterRole's rules in all-namespaces mode,
each watched namespace's Role otherwise. Equal to the rbac.yaml of each overlay in manifests/overlays (a test
compares them). It may create the routers' Roles only because it holds every permission
those Roles grant (RBAC's escalation check). Argument: the peering resource name.
*/}}
{{- define "prefixroute.operatorRules" -}}
- apiGroups: [prefixroute.io]
  resources: [prefixroutedmodels]
  verbs: [get, list, watch, patch]
- apiGroups: [prefixroute.io]
  resources: [prefixroutedmodels/status]
  verbs: [get, patch, update]
- apiGroups: [prefixroute.io]
  resources: [prefixroutedmodels/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, update, patch]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, update, patch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]  # spec.model.cache; no delete: onDelete Delete is an owner reference
  verbs: [get, create, update, patch]
- apiGroups: [batch]
  resources: [jobs]  # spec.model.cache's download, watched for status.modelCache
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]  # spec.networkPolicy: the model's own; delete: turned off again
  verbs: [get, create, update, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, update, patch]
- apiGroups: [discovery.k8s.io]  # granted to the fronts' Roles: their peers are their Service's endpoints
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, create, update, patch, delete]
- apiGroups: [inference.networking.x-k8s.io]  # granted to the picker's Role: its pool's objectives' priorities
  resources: [inferenceobjectives]
  verbs: [get, list]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [""]  # spec.auth: the kubelets' FailedMount events say when a router cannot mount its key Secret
  resources: [events]
  verbs: [list]
- apiGroups: [""]  # spec.autoscaling.prometheusTLS.ca: a model's Prometheus CA bundle, by name (no list, no watch)
  resources: [secrets, configmaps]
  verbs: [get]
- apiGroups: [kopf.dev]
  resources: [{{ . }}]
  verbs: [get, list, watch, patch]
{{- end -}}

{{/* Cross-field checks JSON schema cannot word as well. */}}
{{- define "prefixroute.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.peering.enabled) -}}
{{- fail "replicas > 1 needs peering.enabled: without kopf peering every replica would act on every resource" -}}
{{- end -}}
{{- end -}}
