"""Seven users teach one live server at once: ``python -m benchmarks.multiuser``.

    python -m benchmarks.multiuser                                   # 7 personas, 3 arms, 1 seed
    python -m benchmarks.multiuser seeds=3 rounds=8 conversations=16 eval_tasks=16
    python -m benchmarks.multiuser personas=student,teacher arms=per_user,shared serve.lr=5e-4

For each seed, each arm starts a real ``python -m trainers.serve`` (a subprocess on a free
port, its own run dir under ``out/multiuser-runs/s<seed>/<arm>``, ``seed=<seed>``), and the
chat env's simulated personas (``clawgym/Chat-v0``, :class:`~envs.chat.env.PersonalChatEnv`)
talk to it through the ``openai`` client, one thread per persona, all at the same time:

- **per_user**: ``adapters=per_user``; each request names its persona in the body's ``user``
  field, so each persona's turns train only that persona's adapter and its requests are
  served with it (decoded in batches that mix personas).
- **shared**: ``adapters=shared``, today's default: every persona's turns train the one
  adapter every persona is served.
- **alone**: each persona trained alone, as ``scripts/chat_demo.py`` does: its own
  ``adapters=shared`` server, which only it talks to, run persona after persona. The same
  live protocol, requests, server settings and seed as the other arms, so its figure is the
  comparable one (the offline trainer's per-persona runs take other steps and batches).

A round: every persona holds ``conversations`` training conversations (request, the
server's reply, the persona's reaction: that reaction is the reply's next state, which the
server scores and learns from; the persona then closes the session with a 1-token request
that is never trained on), the benchmark waits until the server has scored and trained all
of it (``/health``: idle, no sample waiting), then asks each persona's first
``eval_tasks`` held-out requests, greedy, as side turns (``X-Turn-Type: side``: recorded,
never trained on). Round 0 is the evaluation before any training. The metric is the
held-out first-reply rate of docs/results/learning-chat-demo.md: the share of replies that
meet every hidden preference of the persona. Each round prints every persona's rate for
every arm side by side, with the weight versions that answered (per_user: the persona's
own version; shared: the server's).

The server's learning settings are its defaults (``method=combine``, lexical judge,
``train_cut=true``, ``train_after_s=60``) with ``batch_size=conversations``: a persona's
round fills one batch of its adapter (per_user, alone), or one batch of the shared adapter
per ``conversations`` samples of any personas (shared). A batch that has not filled trains
once its oldest sample has waited ``train_after_s``, so on a slow machine a round can take
several smaller updates; the versions printed say how many there were. With
``name_user=true`` (the default) every system message names the persona, as
``env_kwargs.persona=all`` does offline (docs/results/learning-personas.md): without it the
personas' requests are the same prompt and one adapter cannot tell them apart.

Keys: ``personas`` (all, or a comma list), ``arms`` (per_user,shared,alone), ``seeds`` (1;
seeds 0..n-1), ``rounds`` (4), ``conversations`` (8, per persona a round), ``eval_tasks``
(8, per persona), ``max_tokens`` (128, per request), ``parallel`` (1: a persona's requests
in flight at once), ``alone_parallel`` (0: parallel; the same in the alone arm, where a
persona's requests are the server's only batch: it changes the batching, not what is
learned), ``batch_size`` (0: conversations), ``train_after_s`` (60), ``name_user`` (true),
``out`` (runs/bench); ``serve.<key>=<value>`` goes to every server (e.g. ``serve.lr=5e-4``).
Writes ``multiuser.json`` and ``multiuser.md`` under ``out`` (again after each round, so a run
stopped later keeps what it measured): per persona and the mean over personas, the final
rate median [min-max] over seeds per arm, and every round of every seed.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.args import key_values

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("per_user", "shared", "alone")
DEFAULTS = {"personas": "all", "arms": ",".join(ARMS), "seeds": "1", "rounds": "4", "conversations": "8",
            "eval_tasks": "8", "max_tokens": "128", "parallel": "1", "alone_parallel": "0", "batch_size": "0",
            "train_after_s": "60", "name_user": "true", "out": "runs/bench"}
POSITIVE = ("seeds", "conversations", "eval_tasks", "max_tokens", "parallel")


# ---- a server, and a persona talking to it (scripts/chat_demo.py uses these too) ------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(run_dir: Path, overrides: list[str], timeout_s: float = 300.0) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m trainers.serve out=<run_dir> <overrides>`` on a free loopback port, its output
    in ``<run_dir>.log``; returns the process and its base URL once it accepts connections."""
    port = free_port()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = run_dir.parent / f"{run_dir.name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "trainers.serve", f"port={port}", f"out={run_dir}",
                                    *overrides], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}; see {log_path}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"the server did not start within {timeout_s:.0f} s; see {log_path}")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url.rstrip('/').removesuffix('/v1')}/health", timeout=10) as response:
        return dict(json.load(response))


def wait_for_training(url: str, drained: bool = False, timeout_s: float = 600.0) -> bool:
    """Let the server finish scoring and training what was said (a real user would just keep
    talking; a round waits so its evaluation sees it). ``drained``: also until no sample waits
    for a batch (a server trains a partial batch after ``train_after_s``). False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = health(url)
        if state.get("idle", True) and (not drained or not state.get("samples_waiting", 0)):
            return True
        time.sleep(1.0)
    return False


def version_of(reply: Any) -> int:
    """The weight version in a reply's ``system_fingerprint`` (``clawgym-v<n>``); -1 if none."""
    fingerprint = getattr(reply, "system_fingerprint", "") or ""
    return int(fingerprint.rsplit("-v", 1)[-1]) if "-v" in fingerprint else -1


class PersonaClient:
    """One simulated persona talking to a server through the ``openai`` client, as an app would.
    ``user``: sent as the body's ``user`` field (the user's name under ``adapters=per_user``)."""

    def __init__(self, url: str, persona: str, max_tokens: int, api_key: str = "", user: str | None = None,
                 name_user: bool | None = None) -> None:
        import openai

        import envs
        from envs.chat.env import PersonalChatEnv

        envs.register_builtin()
        self.client = openai.OpenAI(base_url=url, api_key=api_key or "none", max_retries=0, timeout=900)
        self.persona, self.max_tokens, self.name_user = persona, max_tokens, name_user
        self.extra: dict[str, Any] = {} if user is None else {"user": user}
        self.train_tasks = PersonalChatEnv(persona=persona, split="train", name_user=name_user).task_ids()
        self.eval_tasks = PersonalChatEnv(persona=persona, split="heldout", name_user=name_user).task_ids()

    def _env(self, split: str) -> Any:
        from envs.chat.env import PersonalChatEnv

        return PersonalChatEnv(persona=self.persona, split=split, name_user=self.name_user)  # one per call: threads

    def converse(self, task_id: str, seed: int) -> tuple[float, int]:
        """One training conversation: request, reply, the user's reaction (the next state).
        Returns whether the reply met every preference, and the version that answered."""
        env = self._env("train")
        messages, _ = env.reset(seed=seed, options={"task_id": task_id})
        reply = self.client.chat.completions.create(model="clawgym", messages=messages, max_tokens=self.max_tokens,
                                                    **self.extra)
        content = reply.choices[0].message.content or ""
        reaction, _, _, _, info = env.step(content)
        # The reaction is the next request of the session; the user then leaves, so its
        # own answer is cut to one token and never trained on.
        follow_up = [*messages, {"role": "assistant", "content": content}, *reaction]
        self.client.chat.completions.create(model="clawgym", messages=follow_up, max_tokens=1,
                                            extra_headers={"X-Session-Done": "true"}, **self.extra)
        return float(info["metrics"]["preference_met"]), version_of(reply)

    def evaluate(self, task_id: str, temperature: float | None = 0.0) -> tuple[float, int]:
        """One held-out first reply, a side turn (never trained on); ``temperature`` None: the
        server's default, as a user gets. Returns whether it met every preference, and the version."""
        env = self._env("heldout")
        messages, _ = env.reset(seed=0, options={"task_id": task_id})
        reply = self.client.chat.completions.create(
            model="clawgym", messages=messages, max_tokens=self.max_tokens,
            **({} if temperature is None else {"temperature": temperature}),
            extra_headers={"X-Turn-Type": "side", "X-Session-Done": "true"}, **self.extra)
        met = env.preferences_met(reply.choices[0].message.content or "")
        return float(all(met.values())), version_of(reply)


def rate(results: list[tuple[float, int]]) -> float:
    return sum(r[0] for r in results) / len(results)


# ---- one arm: a server, its personas, its rounds --------------------------------------------
@dataclass
class RoundResult:
    rate: float
    """Held-out first replies meeting every preference, greedy."""
    versions: list[int]
    """Weight versions that answered those replies."""
    train_met: float | None = None
    """The round's training conversations' first replies meeting every preference (None at round 0)."""


@dataclass
class Settings:
    rounds: int
    conversations: int
    eval_tasks: int
    max_tokens: int
    parallel: int
    name_user: bool
    alone_parallel: int = 0
    """A persona's requests in flight at once in the alone arm; 0: ``parallel``."""
    server: list[str] = field(default_factory=list)
    """trainers.serve overrides every server gets (the arm adds adapters=, seed= and out=)."""


def _pmap(fn: Callable[..., tuple[float, int]], items: list[tuple[Any, ...]], parallel: int) -> list[tuple[float, int]]:
    if parallel == 1:
        return [fn(*item) for item in items]
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(lambda item: fn(*item), items))


class Arm:
    """One server and the personas that talk to it, a round at a time."""

    def __init__(self, name: str, run_dir: Path, seed: int, personas: list[str], settings: Settings) -> None:
        self.name, self.run_dir, self.settings = name, run_dir, settings
        self.parallel = settings.alone_parallel if name == "alone" and settings.alone_parallel else settings.parallel
        adapters = "per_user" if name == "per_user" else "shared"
        self.overrides = [f"adapters={adapters}", f"seed={seed}", *settings.server]
        self.personas = personas
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.clients: dict[str, PersonaClient] = {}

    def start(self) -> None:
        self.process, self.url = start_server(self.run_dir, self.overrides)
        s = self.settings
        self.clients = {p: PersonaClient(self.url, p, s.max_tokens, user=p, name_user=s.name_user)
                        for p in self.personas}

    def stop(self) -> None:
        if self.process is not None:
            stop_server(self.process)
            self.process = None

    def round(self, number: int) -> dict[str, RoundResult]:
        """Round ``number``: (from round 1) every persona's training conversations, the wait for
        the server to learn from them, then every persona's held-out replies. One thread per persona."""
        with ThreadPoolExecutor(len(self.personas)) as pool:
            met: dict[str, float | None] = dict.fromkeys(self.personas)
            if number > 0:
                met = dict(zip(self.personas, pool.map(lambda p: self._train(p, number), self.personas)))
                if not wait_for_training(self.url, drained=True):
                    print(f"  {self.name}: the server was still training after 600 s; evaluating anyway",
                          file=sys.stderr)
            evals = dict(zip(self.personas, pool.map(self._evaluate, self.personas)))
        return {p: RoundResult(rate(evals[p]), sorted({v for _, v in evals[p]}), met[p]) for p in self.personas}

    def _train(self, persona: str, number: int) -> float:
        client, n = self.clients[persona], self.settings.conversations
        tasks = client.train_tasks
        items = [(tasks[((number - 1) * n + i) % len(tasks)], number * 1000 + i) for i in range(n)]
        return rate(_pmap(client.converse, items, self.parallel))

    def _evaluate(self, persona: str) -> list[tuple[float, int]]:
        client = self.clients[persona]
        return _pmap(client.evaluate, [(t,) for t in client.eval_tasks[: self.settings.eval_tasks]], self.parallel)


Curves = dict[str, dict[str, list[RoundResult]]]
"""``{arm: {persona: [round 0, round 1, ...]}}``."""


def run_seed(seed: int, arms: list[str], personas: list[str], settings: Settings, out: Path,
             curves: Curves, saved: Callable[[], None] = lambda: None) -> None:
    """Every arm of one seed, into ``curves``; ``saved`` is called after each round. per_user
    and shared run side by side (both servers up, their rounds in turn, printed together);
    alone after, persona after persona."""
    runs = out / "multiuser-runs" / f"s{seed}"
    together = [Arm(a, runs / a, seed, personas, settings) for a in arms if a != "alone"]
    try:
        with ThreadPoolExecutor(max(len(together), 1)) as pool:  # the servers load their models at once
            list(pool.map(Arm.start, together))
        for arm in together:
            curves[arm.name] = {p: [] for p in personas}
        for number in range(settings.rounds + 1):
            started = time.perf_counter()
            results = {arm.name: arm.round(number) for arm in together}
            for name, by_persona in results.items():
                for persona, result in by_persona.items():
                    curves[name][persona].append(result)
            if together:
                print(round_table(seed, number, results, time.perf_counter() - started), flush=True)
                saved()
    finally:
        for arm in together:
            arm.stop()
    if "alone" in arms:
        alone: dict[str, list[RoundResult]] = {}
        curves["alone"] = alone
        for persona in personas:
            arm = Arm("alone", runs / "alone" / persona, seed, [persona], settings)
            arm.start()
            try:
                curve: list[RoundResult] = []
                for number in range(settings.rounds + 1):
                    curve.append(arm.round(number)[persona])
                    print(f"seed {seed} alone {persona} round {number}: {curve[-1].rate:.2f} "
                          f"(version {_versions(curve[-1].versions)})", flush=True)
                alone[persona] = curve
            finally:
                arm.stop()
            saved()


def _versions(versions: list[int]) -> str:
    return ",".join(map(str, versions))


def round_table(seed: int, number: int, results: dict[str, dict[str, RoundResult]], seconds: float) -> str:
    arms = list(results)
    personas = list(next(iter(results.values())))
    lines = [f"seed {seed} round {number} ({seconds:.0f} s): held-out first replies meeting every preference, greedy",
             "  " + f"{'persona':<12}" + "".join(f"{a:>10} {'(v)':<8}" for a in arms)]
    for p in personas:
        lines.append("  " + f"{p:<12}" + "".join(
            f"{results[a][p].rate:>10.2f} {'(' + _versions(results[a][p].versions) + ')':<8}" for a in arms))
    lines.append("  " + f"{'mean':<12}" + "".join(
        f"{statistics.fmean(r.rate for r in results[a].values()):>10.2f} {'':<8}" for a in arms))
    return "\n".join(lines)


# ---- the summary ------------------------------------------------------------------------------
def spread(values: list[float]) -> str:
    """``median [min-max]``, or the one value."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def summary(seeds: dict[int, Curves], arms: list[str], personas: list[str],
            rounds: int) -> tuple[str, dict[str, dict[str, list[float]]]]:
    """The final-round rate per arm, per persona and their mean, over seeds: the Markdown table
    and ``{arm: {persona or "mean": [final rate per seed]}}``. Only arms every seed has finished
    (every persona, ``rounds`` rounds after round 0)."""
    arms = [a for a in arms if seeds and all(a in curves and len(curves[a]) == len(personas)
                                             and all(len(c) == rounds + 1 for c in curves[a].values())
                                             for curves in seeds.values())]
    finals: dict[str, dict[str, list[float]]] = {a: {p: [] for p in [*personas, "mean"]} for a in arms}
    for curves in seeds.values():
        for arm in arms:
            last = [curves[arm][p][-1].rate for p in personas]
            for persona, value in zip(personas, last):
                finals[arm][persona].append(value)
            finals[arm]["mean"].append(statistics.fmean(last))
    lines = ["| persona | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    for persona in [*personas, "mean"]:
        name = "**mean**" if persona == "mean" else persona
        lines.append(f"| {name} | " + " | ".join(spread(finals[a][persona]) for a in arms) + " |")
    return "\n".join(lines), finals


def curves_text(seed: int, curves: Curves) -> str:
    lines = [f"Seed {seed}, held-out rate per round (round 0 before training), then the weight version "
             "that answered the last round:", "", "| arm | persona | rounds 0.. | last version |", "|---|---|---|---|"]
    for arm, by_persona in curves.items():
        for persona, curve in by_persona.items():
            lines.append(f"| {arm} | {persona} | {' '.join(f'{r.rate:.2f}' for r in curve)} | "
                         f"{_versions(curve[-1].versions)} |")
    return "\n".join(lines)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The benchmark's keys, and the ``serve.<key>=<value>`` overrides for every server."""
    server = [item.removeprefix("serve.") for item in argv if item.startswith("serve.")]
    args = key_values([item for item in argv if not item.startswith("serve.")], DEFAULTS, positive=POSITIVE)
    for item in server:
        if "=" not in item:
            raise SystemExit(f"serve.{item} needs a value: serve.<key>=<value>")
    for key in ("rounds", "batch_size", "alone_parallel"):
        if not args[key].isdigit():
            raise SystemExit(f"{key} must be a whole number >= 0, got {args[key]!r}")
    unknown = [a for a in args["arms"].split(",") if a not in ARMS]
    if unknown or not args["arms"]:
        raise SystemExit(f"arms must be a comma list of {', '.join(ARMS)}; got {args['arms']!r}")
    if args["name_user"] not in ("true", "false"):
        raise SystemExit(f"name_user must be true or false, got {args['name_user']!r}")
    return args, server


def main(argv: list[str] | None = None) -> int:
    args, server = parse(sys.argv[1:] if argv is None else argv)
    from envs.chat.catalog import load_personas

    known = sorted(load_personas())
    personas = known if args["personas"] == "all" else args["personas"].split(",")
    if not personas or any(p not in known for p in personas):
        raise SystemExit(f"personas must be all or a comma list of: {', '.join(known)}; got {args['personas']!r}")
    arms = args["arms"].split(",")
    conversations = int(args["conversations"])
    batch_size = int(args["batch_size"]) or conversations
    settings = Settings(rounds=int(args["rounds"]), conversations=conversations, eval_tasks=int(args["eval_tasks"]),
                        max_tokens=int(args["max_tokens"]), parallel=int(args["parallel"]),
                        alone_parallel=int(args["alone_parallel"]), name_user=args["name_user"] == "true",
                        server=[f"batch_size={batch_size}", f"train_after_s={args['train_after_s']}",
                                f"max_new_tokens={args['max_tokens']}", *server])
    out = Path(args["out"])
    started = time.perf_counter()
    seeds: dict[int, Curves] = {}

    def saved() -> tuple[str, float]:  # after every round: a run stopped later keeps what it measured
        table, finals = summary(seeds, arms, personas, settings.rounds)
        minutes = (time.perf_counter() - started) / 60
        write(out, args, server, settings, seeds, table, finals, minutes)
        return table, minutes

    for seed in range(int(args["seeds"])):
        seeds[seed] = {}
        run_seed(seed, arms, personas, settings, out, seeds[seed], saved)
    table, minutes = saved()
    print(f"\nfinal held-out rate after {settings.rounds} rounds, median [min-max] over {len(seeds)} seed(s):\n{table}")
    print(f"saved {out / 'multiuser.json'} and {out / 'multiuser.md'} ({minutes:.1f} min)")
    return 0


def write(out: Path, args: dict[str, str], server: list[str], settings: Settings, seeds: dict[int, Curves],
          table: str, finals: dict[str, dict[str, list[float]]], minutes: float) -> None:
    from benchmarks.perf_decode import machine

    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    where = machine("cpu")
    command = "python -m benchmarks.multiuser " + " ".join(
        [f"{k}={v}" for k, v in args.items() if v != DEFAULTS[k]] + [f"serve.{s}" for s in server])
    out.mkdir(parents=True, exist_ok=True)
    (out / "multiuser.json").write_text(json.dumps({
        "time": stamp, "machine": where, "args": args, "server": settings.server, "minutes": round(minutes, 1),
        "final": finals,
        "rounds": {str(seed): {arm: {p: [{"rate": r.rate, "versions": r.versions, "train_met": r.train_met}
                                         for r in curve] for p, curve in by_persona.items()}
                               for arm, by_persona in curves.items()} for seed, curves in seeds.items()},
    }, indent=2))
    text = [f"### Seven users, one live server: per-user adapters against one shared adapter\n\n{stamp} on {where}, "
            f"{minutes:.1f} min\n\n`{command.strip()}`\n\nServer: `{' '.join(settings.server)}`; "
            f"{settings.rounds} rounds of {settings.conversations} training conversations per persona, "
            f"{settings.eval_tasks} held-out requests per persona (greedy), {settings.max_tokens} tokens per reply."
            f"\n\nFinal held-out first-reply rate, median [min-max] over {len(seeds)} seed(s):\n\n{table}\n"]
    text += [curves_text(seed, curves) + "\n" for seed, curves in seeds.items()]
    (out / "multiuser.md").write_text("\n".join(text))


if __name__ == "__main__":
    sys.exit(main())
