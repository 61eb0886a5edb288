"""Skips for want of a real log or a tool turn into failures under HPCPREDICT_REQUIRE_SERVERS=1
(CI, where ../shared/swf and the Debian packages of .ci/run are there): a broken set-up must
not pass as "skipped"."""

from __future__ import annotations

import pytest

from conftest import REQUIRE_SERVERS_VARIABLE, shared_log, skip_or_fail

MISSING_LOG = "no-such-log-1970.swf.gz"


@pytest.mark.parametrize("check", [lambda: skip_or_fail("no tool"), lambda: shared_log(MISSING_LOG)])
def test_strict_mode_fails_what_would_be_skipped(check, monkeypatch: pytest.MonkeyPatch) -> None:
    # Caught as BaseException: a skip escaping here would skip this test instead of failing it.
    monkeypatch.setenv(REQUIRE_SERVERS_VARIABLE, "1")
    with pytest.raises(BaseException) as strict:
        check()
    assert strict.type is pytest.fail.Exception and "failing, not skipping" in str(strict.value)
    monkeypatch.delenv(REQUIRE_SERVERS_VARIABLE)
    with pytest.raises(BaseException) as lenient:
        check()
    assert lenient.type is pytest.skip.Exception
