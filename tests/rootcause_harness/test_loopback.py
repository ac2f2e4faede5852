"""Loopback-only processes bound their DNS waits, and leave a user's own resolver options alone."""

from __future__ import annotations

import os
import subprocess
import sys

from rootcause_harness.loopback import (
    LOOPBACK_RESOLVER_OPTIONS,
    RESOLVER_OPTIONS_VARIABLE,
    bound_dns_waits,
)
from rootcause_harness.pods import base_env


def test_an_environment_without_resolver_options_gets_the_loopback_bound() -> None:
    assert bound_dns_waits({"PATH": "/bin"}) == {"PATH": "/bin", RESOLVER_OPTIONS_VARIABLE: LOOPBACK_RESOLVER_OPTIONS}


def test_a_users_own_resolver_options_are_kept() -> None:
    env = {RESOLVER_OPTIONS_VARIABLE: "timeout:3"}
    assert bound_dns_waits(env)[RESOLVER_OPTIONS_VARIABLE] == "timeout:3"


def test_simulated_pods_and_the_suites_processes_inherit_the_bound() -> None:
    assert RESOLVER_OPTIONS_VARIABLE in base_env()
    child = subprocess.run([sys.executable, "-c", f"import os; print(os.environ['{RESOLVER_OPTIONS_VARIABLE}'])"],
                           capture_output=True, text=True, check=True, env=dict(os.environ))
    assert child.stdout.strip() == os.environ[RESOLVER_OPTIONS_VARIABLE]
