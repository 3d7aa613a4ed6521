"""Test session setup. OpenMP threads that spin-wait on an oversubscribed 2-core machine
slow torch down >10x; passive waiting keeps model tests fast when other work runs too."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
