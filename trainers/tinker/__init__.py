"""``compute=tinker``: rollouts, the OPD teacher and the LoRA updates on the Tinker API.

settings.py holds the ``tinker.*`` keys (read by trainers/config.py; no SDK import),
policy.py the Policy over a Tinker ``SamplingClient``, trainer.py the learning loop over
``forward_backward`` / ``optim_step`` / ``save_weights_for_sampler``, __main__.py the
time split report (``python -m trainers.tinker split RUN_DIR``). The SDK (``pip install
tinker==0.16.1``, the ``tinker`` extra) is imported only when a Tinker run starts.
"""
