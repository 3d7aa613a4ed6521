"""The judge (PRM): scores a turn by reading its next state, and finds hindsight hints.

Input per turn: the recent conversation, the assistant's turn, and the next state with
its role (the user's reply, a tool's output, the env's observation). Output: a score in
{+1, 0, -1} and, for OPD, an optional hint. See the methods page of the docs
(docs/concepts/methods.md) and the judges guide (docs/guides/judges.md).

Judges here:

- :class:`ModelJudge` — a transformers model: the policy's own base weights with the
  adapter disabled (``judge.kind=self``: one copy of the weights) or another local model.
  ``mode=logprob`` (default) reads the probabilities of the label tokens after
  ``\\boxed{`` in one forward pass, calibrated against a content-free case (contextual
  calibration, Zhao et al. 2021) because small models favour some labels whatever the
  input; ``mode=generate`` samples ``m`` verdicts at temperature 0.6 and takes the majority.
- :class:`EndpointJudge` — any OpenAI-compatible server, ``m`` votes.
- :class:`LexicalJudge` — reads the next state's wording (thanks vs. corrections, errors).
- :class:`EnvJudge` — the env's own reward sign: an oracle, to compare judges against.
"""

from __future__ import annotations

import json
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from envs.messages import Message, text_of
from trainers.config import JudgeConfig
from trainers.judge_parsing import majority_vote, parse_boxed, parse_hint, select_hint

LABELS = (1, -1, 0)

JUDGE_SYSTEM = (
    "You judge an AI assistant's reply by reading what came right after it: the user's next "
    "message or a tool's output. Answer \\boxed{1} if it shows the reply worked (the user thanks "
    "the assistant or moves on; the tool succeeded). Answer \\boxed{-1} if it shows the reply "
    "failed (the user corrects it, complains, asks to redo or change it; the tool reports an "
    "error). Answer \\boxed{0} if you cannot tell."
)

FEW_SHOT: tuple[tuple[str, str, str, str, int], ...] = (
    ("How do I boil an egg?", "Put it in boiling water for 9 minutes.", "user",
     "Perfect, thanks! That's exactly what I needed.", 1),
    ("Plan my weekend.", "Here is a detailed plan with ten sections covering every hour...", "user",
     "Way too long. Two sentences, please.", -1),
    ("List the files.", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}</tool_call>",
     "tool", "exit code 0\nnotes.txt report.csv", 1),
    ("Run the tests.", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"cmd\": \"pytest\"}}</tool_call>",
     "tool", "exit code 2\nERROR: file or directory not found: tests", -1),
    ("What's the weather like?", "It is sunny and 75°F.", "user",
     "Please give me Celsius, not Fahrenheit.", -1),
)

HINT_SYSTEM = (
    "You read an assistant's reply and what came right after it. Decide whether what came "
    "after reveals something the assistant should have known or done (a preference, a "
    "correction, an error it caused). If so, answer \\boxed{1} followed by a 1-3 sentence "
    "instruction between [HINT_START] and [HINT_END]. Otherwise answer \\boxed{-1}."
)


@dataclass
class TurnToJudge:
    context: list[Message]
    """The messages the assistant saw before its turn (the judge sees the last few)."""
    response: str
    next_state: str
    next_role: str = "user"
    env_reward: float = 0.0


@dataclass
class Verdict:
    score: int
    votes: list[int | None] = field(default_factory=list)
    hint: str | None = None
    parsed: bool = True
    """False when no vote parsed: the turn is counted in metrics and gets score 0."""


class Judge(Protocol):
    def judge(self, turns: list[TurnToJudge], want_hints: bool = False) -> list[Verdict]: ...


def _case_text(context: list[Message], response: str, role: str, next_state: str, keep: int = 6) -> str:
    history = "\n".join(f"{m['role']}: {text_of(m)[:600]}" for m in context[-keep:] if m["role"] != "system")
    return (f"Conversation so far:\n{history}\n\nAssistant's reply:\n{response[:1200]}\n\n"
            f"What came next ({role}):\n{next_state[:1200]}\n\nVerdict?")


def judge_messages(turn: TurnToJudge, keep: int = 6) -> list[Message]:
    """The few-shot PRM prompt as chat messages (the answer starts with \\boxed{)."""
    messages: list[Message] = [{"role": "system", "content": JUDGE_SYSTEM}]
    for request, reply, role, nxt, label in FEW_SHOT:
        messages.append({"role": "user", "content": _case_text([{"role": "user", "content": request}],
                                                                reply, role, nxt)})
        messages.append({"role": "assistant", "content": f"\\boxed{{{label}}}"})
    messages.append({"role": "user", "content": _case_text(turn.context, turn.response, turn.next_role,
                                                            turn.next_state, keep)})
    return messages


def hint_messages(turn: TurnToJudge, keep: int = 6) -> list[Message]:
    return [{"role": "system", "content": HINT_SYSTEM},
            {"role": "user", "content": _case_text(turn.context, turn.response, turn.next_role,
                                                   turn.next_state, keep)}]


class ModelJudge:
    """A transformers judge on a :class:`~agents.policy.TransformersPolicy` (adapter off)."""

    def __init__(self, policy: Any, config: JudgeConfig, calibrate: bool = True) -> None:
        self.policy = policy
        self.config = config
        tok = policy.tokenizer
        # After "\\boxed{" the labels' first tokens ("1", "-", "0") differ, so one next-token
        # distribution scores all three in a single forward pass.
        self._label_ids = [tok(str(label), add_special_tokens=False)["input_ids"][0] for label in LABELS]
        if len(set(self._label_ids)) != len(LABELS):
            raise ValueError("this tokenizer gives the judge labels the same first token; use judge.mode=generate")
        self._prior: list[float] | None = None
        self._prefix_len: int | None = None
        if calibrate and config.mode == "logprob":
            neutral = TurnToJudge([{"role": "user", "content": "N/A"}], "N/A", "N/A", "user")
            self._prior = self._label_logprobs([neutral])[0]

    def _prompt_ids(self, messages: list[Message], prefix: str = "") -> list[int]:
        from agents.chat_format import render_prompt

        text = render_prompt(self.policy.tokenizer, messages, None) + prefix
        return self.policy.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _label_logprobs(self, turns: list[TurnToJudge]) -> list[list[float]]:
        prompts = [self._prompt_ids(judge_messages(t, self.config.history_messages), "\\boxed{") for t in turns]
        return self.policy.next_token_logprobs(prompts, self._label_ids, adapter=False,
                                               shared_prefix=self._shared_prefix_len())

    def _shared_prefix_len(self) -> int:
        """Tokens of the system prompt and few-shot examples, the same in every judge prompt."""
        if self._prefix_len is None:
            a = self._prompt_ids(judge_messages(TurnToJudge([], "a", "a"), 0))
            b = self._prompt_ids(judge_messages(TurnToJudge([], "b", "b"), 0))
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            self._prefix_len = max(0, n - 8)  # back off a little: template tokens may merge at the seam
        return self._prefix_len

    def judge(self, turns: list[TurnToJudge], want_hints: bool = False) -> list[Verdict]:
        if not turns:
            return []
        if self.config.mode == "logprob":
            verdicts = []
            for logps in self._label_logprobs(turns):
                if self._prior is not None:
                    logps = [lp - pr for lp, pr in zip(logps, self._prior)]
                best = LABELS[max(range(len(LABELS)), key=lambda i: logps[i])]
                verdicts.append(Verdict(best, [best]))
        else:
            verdicts = self._generate_votes(turns)
        if want_hints:
            for verdict, hint in zip(verdicts, self._hints(turns, verdicts)):
                verdict.hint = hint
        return verdicts

    def _sample(self, prompts: list[list[int]], max_new_tokens: int) -> list[str]:
        from agents.policy import SamplingParams

        params = SamplingParams(temperature=self.config.temperature, max_new_tokens=max_new_tokens)
        repeated = [p for p in prompts for _ in range(self.config.votes)]
        return [c.text for c in self.policy.generate_ids(repeated, params, adapter=False)]

    def _generate_votes(self, turns: list[TurnToJudge]) -> list[Verdict]:
        prompts = [self._prompt_ids(judge_messages(t, self.config.history_messages)) for t in turns]
        texts = self._sample(prompts, max_new_tokens=24)
        m = self.config.votes
        out = []
        for i in range(len(turns)):
            votes = [parse_boxed(t) for t in texts[i * m : (i + 1) * m]]
            out.append(Verdict(majority_vote(votes), votes, parsed=any(v is not None for v in votes)))
        return out

    def _hints(self, turns: list[TurnToJudge], verdicts: list[Verdict]) -> list[str | None]:
        if self.config.hints == "next_state":
            return [correction_hint(t, v.score) for t, v in zip(turns, verdicts)]
        prompts = [self._prompt_ids(hint_messages(t, self.config.history_messages)) for t in turns]
        texts = self._sample(prompts, max_new_tokens=96)
        m = self.config.votes
        return [select_hint([parse_hint(t) for t in texts[i * m : (i + 1) * m]]) for i in range(len(turns))]


_POSITIVE = re.compile(r"\b(thanks?|thank you|perfect|great|exactly|helpful|love (it|this)|nice|awesome|"
                       r"that works|got it|appreciate|excellent|well done|spot on)\b", re.I)
_NEGATIVE = re.compile(r"\b(please|too (long|short|formal|casual|much)|don'?t|do not|doesn'?t|does not|didn'?t|"
                       r"did not|isn'?t|instead|rather|stop|again|redo|not what|wrong|no\b|never|prefer|"
                       r"could you|can you|i asked|i said|i need (this|it|you|the)|remember|forgot|should|"
                       r"where'?s|keep it|shorter|at most|tops|why|can'?t|cannot|convert|use my|avoid|"
                       r"skip|kindly)\b", re.I)
_ERROR = re.compile(r"(traceback|error|exception|failed|command not found|no such file|exit code [1-9])", re.I)


def lexical_score(next_state: str, role: str) -> int:
    """+1 / -1 / 0 from the wording of the next state (corrections outrank thanks)."""
    if role == "tool":
        return -1 if _ERROR.search(next_state) else (1 if re.search(r"exit code 0\b", next_state) else 0)
    negative, positive = bool(_NEGATIVE.search(next_state)), bool(_POSITIVE.search(next_state))
    if negative:
        return -1
    return 1 if positive else 0


def correction_hint(turn: TurnToJudge, score: int) -> str | None:
    """``judge.hints=next_state``: a turn scored -1 gets its next state as the hint."""
    text = turn.next_state.strip()
    return text if score < 0 and len(text) > 10 else None


class _RuleJudge:
    """A judge whose score is a rule over one turn; hints are the next state on a -1."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config

    def score(self, turn: TurnToJudge) -> int:
        raise NotImplementedError

    def judge(self, turns: list[TurnToJudge], want_hints: bool = False) -> list[Verdict]:
        out = []
        for t in turns:
            score = self.score(t)
            out.append(Verdict(score, [score], correction_hint(t, score) if want_hints else None))
        return out


class LexicalJudge(_RuleJudge):
    """Reads the next state's wording. Cheap and strong on simulated users; say so in results."""

    def score(self, turn: TurnToJudge) -> int:
        return lexical_score(turn.next_state, turn.next_role)


class EnvJudge(_RuleJudge):
    """The env's reward sign as the score: the oracle the other judges are measured against."""

    def score(self, turn: TurnToJudge) -> int:
        return (turn.env_reward > 0) - (turn.env_reward < 0)


class EndpointJudge:
    """Any OpenAI-compatible chat endpoint; ``votes`` samples per turn, run concurrently."""

    def __init__(self, config: JudgeConfig, timeout_s: float = 60.0) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.url = config.endpoint.rstrip("/") + "/chat/completions"

    def _ask(self, messages: list[Message], n: int, max_tokens: int) -> list[str]:
        body = json.dumps({"model": self.config.endpoint_model or "default", "messages": messages, "n": n,
                           "temperature": self.config.temperature, "max_tokens": max_tokens}).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.load(response)
        except (OSError, ValueError):
            return []
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list):  # not an OpenAI-style body: no votes, counted as unparsed
            return []
        return [str((c.get("message") or {}).get("content") or "") for c in choices if isinstance(c, dict)]

    def judge(self, turns: list[TurnToJudge], want_hints: bool = False) -> list[Verdict]:
        keep = self.config.history_messages
        with ThreadPoolExecutor(max_workers=8) as pool:
            scored = list(pool.map(lambda t: self._ask(judge_messages(t, keep), self.config.votes, 32), turns))
            ask_hints = want_hints and self.config.hints == "judge"
            hinted = list(pool.map(lambda t: self._ask(hint_messages(t, keep), self.config.votes, 128), turns)) \
                if ask_hints else [[] for _ in turns]
        out = []
        for turn, texts, hint_texts in zip(turns, scored, hinted):
            votes = [parse_boxed(t) for t in texts]
            score = majority_vote(votes)
            if ask_hints:
                hint = select_hint([parse_hint(t) for t in hint_texts])
            else:
                hint = correction_hint(turn, score) if want_hints else None
            out.append(Verdict(score, votes, hint, parsed=any(v is not None for v in votes)))
        return out


def make_judge(config: JudgeConfig, policy: Any) -> Judge:
    if config.kind == "self":
        return ModelJudge(policy, config)
    if config.kind == "model":
        from agents.adapters import LoraSettings
        from agents.policy import TransformersPolicy

        # The judge model runs where the policy runs (if any), in its precision.
        return ModelJudge(TransformersPolicy(config.model, lora=LoraSettings(enabled=False),
                                             device=getattr(policy, "device", "cpu"),
                                             dtype=getattr(policy, "dtype", "float32")), config)
    if config.kind == "endpoint":
        return EndpointJudge(config)
    if config.kind == "lexical":
        return LexicalJudge(config)
    return EnvJudge(config)
