"""`fleet exec` pieces that need no SSH server: grouping and target building."""

from __future__ import annotations

from pathlib import Path

from fleet.remote.ssh_exec import ExecResult, SshTarget, group_results, run_everywhere


def test_identical_results_are_grouped_largest_first() -> None:
    results = [
        ExecResult("h3", 0, "550.54.15\n", "", None, 0.1),
        ExecResult("h1", 0, "550.54.15\n", "", None, 0.1),
        ExecResult("h2", 0, "555.42.02\n", "", None, 0.1),
        ExecResult("h4", None, "", "", "timed out after 5s", 5.0),
    ]
    groups = group_results(results)
    assert [g.hosts for g in groups] == [("h1", "h3"), ("h2",), ("h4",)]
    assert groups[-1].error == "timed out after 5s"


def test_target_from_pyinfra_host_data() -> None:
    t = SshTarget.from_host_data("gpu-01", {"ssh_hostname": "10.0.0.5", "ssh_port": 2222,
                                            "ssh_user": "ops", "ssh_key": "/k"})
    assert (t.hostname, t.port, t.user, t.key) == ("10.0.0.5", 2222, "ops", "/k")
    assert SshTarget.from_host_data("gpu-02", {}).hostname == "gpu-02"


def test_unreachable_host_is_a_result_not_an_exception(tmp_path: Path) -> None:
    (res,) = run_everywhere([SshTarget("dead", "127.0.0.1", port=1)], "true",
                            timeout=2, connect_timeout=2)
    assert res.exit_code is None and res.error
