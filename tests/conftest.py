"""Settings every tier shares.

Property tests explore at random on a developer's machine (a new counterexample is a
finding), but CI must pass or fail on the code alone: there (CI is set) Hypothesis runs
derandomized, every example derived from the test itself. Counterexamples that found
bugs stay in the tests as explicit `@example`s, so they run everywhere.
HYPOTHESIS_PROFILE=ci|dev chooses explicitly.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
