"""PersonalChat: a simulated user with hidden preferences reacts to the agent's reply."""

from __future__ import annotations

from typing import Any

from envs.chat.catalog import CatalogError, Persona, Request, load_personas, load_requests
from envs.chat.preferences import OnTopic, Preference
from envs.chat.user import LLMUser, ScriptedUser, SimulatedUser, judge
from envs.core import ClawEnv, Opening, StopReason, Transition
from envs.messages import AssistantTurn, InvalidAction

SYSTEM_PROMPT = "You are a helpful personal assistant."
DEFAULT_PERSONA = "student"


class PersonalChatEnv(ClawEnv):
    """Answer a user whose preferences are hidden; learn them from how the user reacts.

    ## Description
    Each episode pairs a persona (``data/personas/*.yaml``) with one everyday request
    (``data/requests.yaml``). The persona has hidden preferences about the *form* of a
    reply: its length, format, wording, how to address them (``envs.chat.preferences``).
    Every reply is checked against all of them, plus the implicit ``on_topic`` check (the
    reply mentions what was asked). If all hold, the user thanks the assistant and leaves;
    otherwise the user corrects the first unmet one ("Too long. Two sentences, please.")
    and the assistant may try again. The headline metric, as in OpenClaw-RL, is the rate
    at which the *first* reply of an episode meets every preference.

    ## Observation
    Reset: a system message (``"You are a helpful personal assistant."``: the preferences
    stay hidden) and the user's request. Step: the user's reply (praise or a correction).

    ## Action
    An assistant message; its text is the reply. There are no tools: a tool call is an
    invalid action (reward ``invalid_action_reward``, default -1.0, and
    ``preference_met = 0``).

    ## Reward
    +1.0 when the reply meets every preference, else -1.0 (with ``partial_credit=True``:
    ``2 * fraction_met - 1``). A judge reading ``info["next_state"]`` (the user's reply) may
    replace it. ``info["metrics"]``: ``preference_met`` (1/0, all met), ``preference_fraction``
    (fraction met), ``pref/<kind>`` (1/0 per checked preference, ``pref/on_topic`` included)
    and ``first_response`` (1 on the episode's first step, so the headline rate is the mean
    of ``preference_met`` over steps where ``first_response == 1``).

    ## Episode End
    Terminated (``user_left``) when a reply meets every preference, or when the user has
    corrected ``patience`` replies (the last correction is still the step's observation and
    ``next_state``: the user says what was wrong, then goes). Truncated (``max_turns``)
    after ``max_turns`` replies if that budget is smaller than ``patience``, or
    (``error``, with ``info["error"]``) when an LLM-played user's endpoint fails.

    ## Arguments
    ``persona``: a persona name (default ``"student"``) or ``"all"`` to draw one per episode.
    ``split``: ``"train"`` (default), ``"heldout"`` or ``"all"`` requests.
    ``patience``: replies the user corrects before leaving (default 1: one reply per
    episode; 3 gives the assistant two more tries).
    ``max_turns``: the episode's turn budget (default 20).
    ``user``: ``"scripted"`` (default) or ``"llm"``, which needs ``user_endpoint`` (an
    OpenAI-compatible base URL) and ``user_model``; ``user_timeout_s`` (default 60) and
    ``user_api_key`` tune it. The checker still decides reward and metrics.
    ``personas_dir``: a folder of extra persona YAML files.
    ``partial_credit``: reward the fraction of preferences met (default False).
    ``name_user``: the system message names the user's persona (``"... The user is
    'friend'."``), as an assistant serving several people knows who is asking; default:
    True with ``persona="all"`` (without it the personas' requests are the same prompt, and
    no policy can meet preferences that conflict), False with one persona.
    ``options={"task_id": "student/cook-01"}`` picks persona and request; reset's
    ``info["user_id"]`` is the episode's persona (the env contract's user id), so
    ``trainers.run adapters=per_user`` learns one adapter per persona.

    ## Version History
    v0: initial version. Episodes end with the user leaving after ``patience`` replies
    (default 1), rather than being truncated by a turn budget.
    """

    tools: list[dict[str, Any]] = []
    headline_metric = "preference_met"
    eval_max_turns = 1  # the headline metric is read on the first response
    rollout_temperature = 0.6  # OpenClaw-RL's live value: this env imitates a live user

    def __init__(self, persona: str = DEFAULT_PERSONA, split: str = "train", patience: int = 1,
                 max_turns: int = 20,
                 user: str = "scripted", user_endpoint: str | None = None,
                 user_model: str | None = None, user_timeout_s: float = 60.0,
                 user_api_key: str | None = None, personas_dir: str | None = None,
                 partial_credit: bool = False, name_user: bool | None = None, **kwargs: Any) -> None:
        # A malformed action (e.g. a stray <tool_call>) must not beat a wrong answer's -1.
        kwargs.setdefault("invalid_action_reward", -1.0)
        super().__init__(max_turns=max_turns, **kwargs)
        if patience < 1:
            raise ValueError(f"patience must be >= 1 (replies the user corrects before leaving), "
                             f"got {patience}")
        self.patience = patience
        if split not in ("train", "heldout", "all"):
            raise ValueError(f"split must be 'train', 'heldout' or 'all', got {split!r}")
        if user not in ("scripted", "llm"):
            raise ValueError(f"user must be 'scripted' or 'llm', got {user!r}")
        if user == "llm" and not (user_endpoint and user_model):
            raise ValueError("user='llm' needs user_endpoint= (an OpenAI-compatible base URL, "
                             "e.g. http://localhost:30000/v1) and user_model=")
        self.personas = load_personas(personas_dir)
        if persona != "all" and persona not in self.personas:
            raise CatalogError(f"unknown persona {persona!r}; known: "
                               f"{', '.join(sorted(self.personas))}, or 'all'; add one as "
                               "<name>.yaml in personas_dir=")
        self.persona_names = sorted(self.personas) if persona == "all" else [persona]
        self.name_user = persona == "all" if name_user is None else bool(name_user)
        self.split = split
        self.requests = {r.id: r for r in load_requests() if split in ("all", r.split)}
        self.partial_credit = partial_credit
        # A scripted user answers a replayed reply as it did the first time; an LLM user need not.
        self.opd_gate = "replay" if user == "scripted" else "none"
        self.user: SimulatedUser = (ScriptedUser() if user == "scripted" else
                                    LLMUser(user_endpoint or "", user_model or "",
                                            timeout_s=user_timeout_s, api_key=user_api_key))
        self._tasks = [f"{name}/{rid}" for name in self.persona_names
                       for rid, request in self.requests.items()
                       if self.personas[name].wants(request)]
        if not self._tasks:
            raise CatalogError(f"no {split!r} request matches the request_tags of persona "
                               f"{persona!r}; widen request_tags or use split='all'")
        self.persona: Persona = self.personas[self.persona_names[0]]
        self.request: Request = next(iter(self.requests.values()))

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def checks(self, task_id: str | None = None) -> tuple[Preference, ...]:
        """The preferences a reply to ``task_id`` (default: this episode's) is checked
        against, in order: ``on_topic`` first, then the persona's."""
        persona, request = self._resolve(task_id) if task_id else (self.persona, self.request)
        on_topic = OnTopic(keywords=request.keywords, topic=request.topic)
        return (on_topic, *persona.preferences)

    def preferences_met(self, response: str, task_id: str | None = None) -> dict[str, bool]:
        """Which preferences ``response`` meets, by kind, for ``task_id`` (default: this
        episode's task). For evaluation code; it changes nothing in the env."""
        return judge(self.checks(task_id), response).as_dict()

    def _resolve(self, task_id: str) -> tuple[Persona, Request]:
        if task_id not in self._tasks:
            name, _, rid = task_id.partition("/")
            if name not in self.persona_names:
                why = f"persona {name!r} is not one of {self.persona_names}"
            elif rid not in self.requests:
                why = f"request {rid!r} is not in the {self.split!r} split"
            else:
                why = f"persona {name!r} does not take request {rid!r} (its request_tags)"
            raise ValueError(f"unknown task_id {task_id!r}: {why}; expected "
                             f"'<persona>/<request id>', see task_ids()")
        name, _, rid = task_id.partition("/")
        return self.personas[name], self.requests[rid]

    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        if task_id is None:
            task_id = self._tasks[int(self.np_random.integers(len(self._tasks)))]
        self.persona, self.request = self._resolve(task_id)
        system = f"{SYSTEM_PROMPT} The user is {self.persona.name!r}." if self.name_user else SYSTEM_PROMPT
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": self.request.text}]
        # the persona is the user: trainers.run adapters=per_user trains an adapter for each
        return Opening(messages, task_id=task_id, info={"user_id": self.persona.name})

    def _invalid(self, exc: InvalidAction, action: object) -> Transition:
        # A malformed reply meets no preference: it still counts toward the headline rate.
        transition = super()._invalid(exc, action)
        transition.metrics.update({"preference_met": 0.0, "preference_fraction": 0.0,
                                   "first_response": float(self._turn == 1)})
        if self._turn >= self.patience:
            transition.stop = StopReason.USER_LEFT
        return transition

    def _act(self, turn: AssistantTurn) -> Transition:
        verdict = judge(self.checks(), turn.content)
        reply = self.user.reply(self.persona, self.transcript, verdict, self.np_random)
        fraction = sum(verdict.met) / len(verdict.met)
        metrics = {"preference_met": float(verdict.all_met), "preference_fraction": fraction,
                   "first_response": float(self._turn == 1)}
        metrics.update({f"pref/{kind}": float(ok) for kind, ok in verdict.as_dict().items()})
        if self.partial_credit:
            reward = 2.0 * fraction - 1.0
        else:
            reward = 1.0 if verdict.all_met else -1.0
        leaves = verdict.all_met or self._turn >= self.patience
        return Transition([{"role": "user", "content": reply}], reward=reward,
                          stop=StopReason.USER_LEFT if leaves else None,
                          metrics=metrics)
