"""One cache folder for everything built or downloaded: $PREFIXROUTE_CACHE, else ~/.cache/prefixroute."""

from pathlib import Path

from prefixroute.cache_folder import cache_dir


def test_the_variable_wins_and_is_read_on_every_call(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFIXROUTE_CACHE", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.setenv("PREFIXROUTE_CACHE", "~/elsewhere")
    assert cache_dir() == Path.home() / "elsewhere"


def test_the_default_is_under_the_home_cache(monkeypatch):
    monkeypatch.delenv("PREFIXROUTE_CACHE", raising=False)
    assert cache_dir() == Path.home() / ".cache" / "prefixroute"
