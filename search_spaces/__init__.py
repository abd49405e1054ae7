"""The shipped search spaces (``default``, ``torch``, ``dali``, ``cpu``, ``user``, ``dali_user``): YAML data, installed as the package
``autotune.search_spaces`` so that they are found by name from any folder (:mod:`autotune.study.space`)."""
