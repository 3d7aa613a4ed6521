"""Benchmark summaries per suite, the oracle's rows, and the fairness check."""

from __future__ import annotations

import pytest

from envs.toolcall.__main__ import main
from envs.toolcall.benchmark import check_markdown, check_rows, markdown, oracle_rows, summarize


def row(task_id: str, category: str, success: float | None) -> dict:
    return {"task_id": task_id, "category": category, "success": success}


def test_bfcl_summary_reports_categories_and_groups():
    rows = [row(f"simple_python_{i}", "simple_python", float(i < 3)) for i in range(4)]
    rows += [row("multiple_0", "multiple", None)]  # an env error counts as a failure
    summary = summarize("bfcl", rows)
    assert summary["accuracy"]["simple_python"] == {"accuracy": 0.75, "count": 4}
    assert summary["accuracy"]["multiple"] == {"accuracy": 0.0, "count": 1}
    assert "| simple_python | 75.00% | 4 |" in markdown(summary)


def test_tau2_summary_is_pass_hat_k_per_domain():
    rows = [row("airline_0", "airline", 1.0), row("airline_0", "airline", 0.0),
            row("retail_3", "retail", 1.0), row("retail_3", "retail", 1.0)]
    summary = summarize("tau2", rows)
    assert summary["trials"] == 2
    assert summary["pass_hat_k"]["airline"] == {1: 0.5, 2: 0.0}
    assert summary["pass_hat_k"]["all"] == {1: 0.75, 2: 0.5}
    assert summary["headline"] == 0.75
    assert "| retail | 100.0% | 100.0% |" in markdown(summary)


def test_toolmath_summary_is_accuracy_per_kind():
    summary = summarize("toolmath", [row("a", "dates", 1.0), row("b", "units", 0.0)])
    assert summary["accuracy"]["all"] == {"accuracy": 0.5, "count": 2}
    assert summary["headline"] == 0.5


def test_oracle_rows_have_the_benchmark_s_shape():
    rows = oracle_rows("bfcl", tasks=5, categories="simple_python")
    assert [r["task_id"] for r in rows] == [f"simple_python_{i}" for i in range(5)]
    assert all(r["success"] == 1.0 and r["category"] == "simple_python" for r in rows)
    assert set(rows[0]) == {"task_id", "category", "difficulty", "success", "return", "turns",
                            "stop_reason", "error"}


@pytest.mark.slow
def test_oracle_rows_for_tau2_use_the_scripted_user():
    rows = oracle_rows("tau2", tasks=2)
    assert [r["success"] for r in rows] == [1.0, 1.0]


def test_the_check_wants_the_oracle_to_pass_and_an_idle_agent_to_fail_except_where_declining_is_right():
    rows = check_rows("bfcl", task_ids=["simple_python_0", "multiple_3", "irrelevance_0"])
    assert [(r["oracle"], r["idle"], r["declining_is_the_answer"], r["problem"]) for r in rows] == [
        (1.0, 0.0, False, None), (1.0, 0.0, False, None), (1.0, 1.0, True, None)]
    assert "| all | 3 | 3 | 1 | 1 | 0 |" in check_markdown(rows)


def test_tau2_refusals_are_passed_by_the_idle_agent_and_named_as_such():
    # airline_0: the user asks for a cancellation the policy forbids (no gold action); airline_2
    # ends with a certificate sent for a delayed flight, which an agent that calls nothing never sends
    rows = {r["task_id"]: r for r in check_rows("tau2", split="all", task_ids=["airline_0", "airline_2"])}
    assert (rows["airline_0"]["idle"], rows["airline_0"]["declining_is_the_answer"]) == (1.0, True)
    assert (rows["airline_2"]["idle"], rows["airline_2"]["declining_is_the_answer"]) == (0.0, False)
    assert rows["airline_0"]["oracle"] == rows["airline_2"]["oracle"] == 1.0
    assert not any(r["problem"] for r in rows.values())


def test_the_check_command_names_an_unfair_question_and_exits_1(capsys):
    # BFCL's own answer for this question requires an array no value of which it accepts
    assert main(["check", "bfcl", "--task", "live_simple_106-63-0", "--task", "simple_python_0"]) == 1
    out = capsys.readouterr().out
    assert "UNFAIR live_simple_106-63-0: the oracle fails" in out
    assert "1/2 tasks of bfcl fair" in out
    assert main(["check", "bfcl", "--task", "simple_python_0"]) == 0
