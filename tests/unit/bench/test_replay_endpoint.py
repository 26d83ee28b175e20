"""A replay endpoint the replay client cannot use is refused where it is written: the matrix
(`fleet matrix check`, exit 2 with file:line: field) and `bench run --endpoint`; before, an
`https://` endpoint passed the check and failed at the replay gate mid-rollout (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.bench import replay
from fleet.cli.app import run
from fleet.domain.endpoint import endpoint_problem
from fleet.remote.bench import replay_args

EXAMPLE = Path(__file__).parents[3] / "matrices" / "example.yaml"

USABLE = ["http://127.0.0.1:8000", "http://127.0.0.1:8000/infer", "http://svc.local",
          "http://[::1]:8080/v1/", "http://gpu-01.dc1.example.com:65535/a_b.c~d"]
UNUSABLE = ["https://127.0.0.1:8443/infer", "HTTPS://svc", "ftp://x", "http://", "127.0.0.1:80",
            "http://user@svc/", "http://svc/?q=1", "http://svc/a b", "http://svc:0",
            "http://svc:99999", "http://svc/#frag", "http://-svc"]


@pytest.mark.parametrize("endpoint", USABLE)
def test_what_the_client_can_use_passes_everywhere(endpoint: str) -> None:
    assert endpoint_problem(endpoint) is None
    assert replay_args({"endpoint": endpoint})[:2] == ["--endpoint", endpoint]
    url = replay.urlsplit(endpoint)  # the client's own test (fleet/bench/replay.py run_http)
    assert url.scheme == "http" and url.hostname


@pytest.mark.parametrize("endpoint", UNUSABLE)
def test_what_it_cannot_use_is_refused(endpoint: str) -> None:
    assert endpoint_problem(endpoint)
    with pytest.raises(ValueError, match="endpoint"):
        replay_args({"endpoint": endpoint})


def test_https_says_why() -> None:
    why = endpoint_problem("https://svc:8443/infer") or ""
    assert "plain HTTP only, not https://" in why


def _exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        run(argv)
    return int(info.value.code or 0), capsys.readouterr().err


def test_matrix_check_refuses_it_with_file_line_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = EXAMPLE.read_text().replace(
        "gates: {health: true, benchmark: true, replay: true, max_retries: 2}",
        "gates: {health: true, benchmark: true, replay: true, max_retries: 2,\n"
        "              replay_endpoint: 'https://127.0.0.1:8443/infer'}", 1)
    assert "replay_endpoint" in text
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, err = _exit(["matrix", "check", str(path)], capsys)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "replay_endpoint" in t)
    assert code == 2, err
    assert f"{path}:{line}: pools.h100.rollout.gates.replay_endpoint:" in err
    assert "plain HTTP only" in err


def test_bench_run_refuses_it_before_any_host(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "method": "GET", "path": "/"}\n')
    code, err = _exit(["--db", str(tmp_path / "f.db"), "bench", "run", "-i", "nope.py",
                       "--suite", "replay", "--trace", str(trace),
                       "--endpoint", "https://svc/"], capsys)
    assert code == 2 and "--endpoint: the replay client speaks plain HTTP only" in err, err
    assert not (tmp_path / "f.db").exists()
