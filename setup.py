"""Build hook for the optional compiled scorer of prompt_guard (everything else is in pyproject.toml).

The extension is `optional`: without a C compiler the install still succeeds and prompt_guard
uses its pure-Python scorer, which gives the same scores, more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "plugins.prompt_guard._native",
            ["plugins/prompt_guard/_native.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
