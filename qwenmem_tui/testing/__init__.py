"""Test and demo support: the OpenAI-compatible fake server and the demo model.

Never imported by the app at run time; the suite, the benchmarks and the README's
demo use it.
"""
