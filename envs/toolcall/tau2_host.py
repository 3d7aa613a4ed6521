"""tau2's domain environment as the tool process runs it (:mod:`envs.toolcall.worker`).

One episode's tau2 ``Environment`` (a fresh copy of the domain's database), its tool calls
through tau2's own ``Environment.get_response`` (which catches a tool's exception and
answers ``Error: ...``), and what the reward reads from it afterwards: the database hashes
and the task's environment assertions. tau2's ``calculate`` tool runs ``eval`` on the
agent's expression (digits, ``+-*/()``, dots and spaces only), so ``9**9**9**9`` would
hold a process for ever; here the worker's time limit stops it.
"""

from __future__ import annotations

from typing import Any

from envs.toolcall import tau2_data as tau2
from envs.toolcall.limits import clip


class Tau2Host:
    """One episode's tau2 environment, in the tool process."""

    def __init__(self) -> None:
        self.environment: Any = None
        self.task: Any = None
        self.tool_names: frozenset[str] = frozenset()
        self.max_output_chars = 0

    def op_open(self, domain: str, task_id: str, max_output_chars: int) -> None:
        self.environment = tau2.new_environment(domain)
        self.task = tau2.domain_tasks(domain)[task_id]
        self.tool_names = frozenset(t["function"]["name"] for t in tau2.domain_tools(domain))
        self.max_output_chars = max_output_chars

    def op_call(self, id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:  # noqa: A002
        """``{"content": ..., "error": bool}`` of tau2's ``ToolMessage``."""
        if name not in self.tool_names:
            return {"content": f"Error: Tool '{name}' not found.", "error": True}
        call = tau2.tau2()["ToolCall"](id=id, name=name, arguments=arguments, requestor="assistant")
        response = self.environment.get_response(call)
        content = response.content if response.content is not None else ""
        return {"content": clip(content, self.max_output_chars), "error": bool(response.error)}

    def op_hashes(self) -> list[str | None]:
        """The agent's and the user's database hashes now."""
        return [self.environment.get_db_hash(), self.environment.get_user_db_hash()]

    def op_assertions(self) -> list[bool]:
        """Whether each of the task's environment assertions holds now."""
        criteria = self.task.evaluation_criteria
        return [bool(self.environment.run_env_assertion(a, raise_assertion_error=False))
                for a in (criteria.env_assertions or [] if criteria else [])]
