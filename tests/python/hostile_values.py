"""Hostile values and the signs of a crash, shared by the hostile-configuration tests
(test_hostile_config.py, test_hostile_config_installed.py)."""

GiB = 1 << 30
MB1 = 1 << 20  # a 1 MB value (longer than an environment variable may be, so in-process only)
BIG = "9" * MB1
CRASH_SIGNS = ("terminate called", "INTERNAL ASSERT", "Segmentation fault", "Aborted", "core dumped",
               "Exception ignored", "incompatible function arguments")
