"""A policy plays a simulated user: tau2's customer, the very model being trained or evaluated.

    from envs.toolcall.users import bind_user
    bind_user(PolicyUser(policy, max_new_tokens=256))   # envs made with user="policy" use it

It is the :class:`envs.toolcall.users.UserModel` the envs cannot write themselves, since
they know no policy: the user's prompt (instructions and the conversation with roles
flipped) is sampled without tools, and the reply's text is the user's next message.
"""

from __future__ import annotations

from agents.policy import Policy, SamplingParams
from envs.messages import Message


class PolicyUser:
    """An in-process policy plays the user (sampled without tools); ``temperature`` 0 is
    tau2's default."""

    def __init__(self, policy: Policy, *, temperature: float = 0.0, max_new_tokens: int = 256) -> None:
        self.policy = policy
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens

    def reply(self, messages: list[Message], seed: int) -> str:
        sampling = SamplingParams(temperature=self.temperature, max_new_tokens=self.max_new_tokens)
        completion = self.policy.generate([messages], None, sampling)[0]
        content = completion.message.get("content")
        text = content if isinstance(content, str) else completion.text
        return text.strip()
