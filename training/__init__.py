"""Offline data building and training for prompt_guard's models (run by hand, never in CI).

A top-level folder of the repository, not part of the installed package: the wheel holds the runtime
(`plugins/prompt_guard`) and its model files only. Run the scripts from the repository's root
(`python -m training.build_data …`). Data sources: DATA.md; the runs and their results: HISTORY.md.
"""
