"""download_outcomes: every exit status reads as one reason, with advice for each."""

from prefixroute.download_outcomes import ADVICE, EXIT_GATED, EXIT_OK, REASONS, reason_of_exit


def test_exit_statuses_read_as_reasons_and_each_has_advice() -> None:
    assert reason_of_exit(EXIT_OK) == "Ready"
    assert reason_of_exit(EXIT_GATED) == "Gated"
    assert reason_of_exit(None) == reason_of_exit(137) == "Failed"
    assert set(REASONS.values()) == set(ADVICE)
