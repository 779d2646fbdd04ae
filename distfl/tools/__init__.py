"""The commands that work on run files and on many runs, beside ``distfl run``:

- :mod:`~distfl.tools.inspection`: ``distfl inspect RUN.h5``;
- :mod:`~distfl.tools.gather`: ``distfl status RUN.h5`` and ``distfl gather RUN.h5|DIR ...``;
- :mod:`~distfl.tools.suite`: ``distfl suite`` (scenarios x algorithms x seeds);
- :mod:`~distfl.tools.bench`: ``distfl bench`` (distfl against a plain PyTorch loop and
  Flower).

They build on the rest of distfl (the config, the runtime, the run file) and nothing else
in distfl builds on them but the command line (:mod:`distfl.cli`) and ``distfl report``.
"""
