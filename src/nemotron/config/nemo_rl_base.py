"""NeMo RL's own Ultra recipes as the lowest layer of an RL stage config (``nemo_rl.base``)."""

from __future__ import annotations

import copy
from pathlib import Path

from nemotron.config.images import keylist_version
from nemotron.config.keys import load_keylist
from nemotron.errors import ConfigError

#: Our key (dropped before NeMo RL sees the config): ``nemo_rl.base`` names the NeMo RL recipe the stage config
#: is layered on (a path inside NeMo RL's checkout, ``examples/nemo_gym/nemotron-3-ultra/<name>.yaml``), and
#: ``nemo_rl.replace`` the top-level sections of it that the stage config replaces whole instead of merging
#: into (``env``: the recipe's NeMo Gym server set names judges this project does not start).
BASE_KEY = "nemo_rl"


def keylist() -> dict:
    """NeMo RL's key list at the commit ``stages/images.toml`` pins for the ``nemo-rl`` image (it carries the
    resolved recipes, ``recipes``; :mod:`nemotron.config.keys`).

    Raises:
        KeyError: no key list is stored for the pinned commit.
    """

    return load_keylist(keylist_version("nemo-rl", "nemo_rl") or "", "nemo-rl")


def base_recipe(name: str, replace: list | tuple = ()) -> tuple[str, dict]:
    """``(label, config)``: NeMo RL's recipe ``name`` (``examples/nemo_gym/nemotron-3-ultra/student_rlvr1.yaml``)
    as NeMo RL's own loader composes it (``nemo_rl.utils.config.load_config``; stored in the key list by
    ``scripts/nemo_rl_keys.py``, interpolations as written: they resolve with the compiled config), without
    the top-level sections in ``replace``. ``label`` is the layer name ``--dry-run`` shows
    (``nemo-rl:student_rlvr1.yaml``).

    Raises:
        ConfigError: ``name`` is not one of the stored recipes (the message lists them), or ``replace`` names
            something that is not a section of it.
    """
    recipes = keylist().get("recipes") or {}
    if name not in recipes:
        import difflib

        close = difflib.get_close_matches(str(name), list(recipes), n=1)
        raise ConfigError(f"{BASE_KEY}.base={name!r}: not a NeMo RL recipe stored for the pinned commit",
                          (f"did you mean '{close[0]}'? " if close else "") + f"recipes: {', '.join(recipes) or 'none'}")
    data = copy.deepcopy(recipes[name])
    for section in replace or ():
        if section not in data:
            raise ConfigError(f"{BASE_KEY}.replace: {section!r} is not a section of {name}",
                              f"sections: {', '.join(data)}")
        del data[section]
    return f"nemo-rl:{Path(name).name}", data


def base_layer(raw: dict, overrides: dict | None = None) -> tuple[str, dict] | None:
    """The recipe layer of a stage config: ``raw`` is the stage's config files merged, nothing resolved
    (``default.yaml`` and the ``-c`` chain), ``overrides`` the command line's ``nemo_rl.*`` values. None when
    the config names no base (``nemo_rl.base: null``).

    Raises:
        ConfigError: see :func:`base_recipe`; ``nemo_rl.replace`` that is not a list of names.
    """
    own = dict(raw.get(BASE_KEY) or {}) if isinstance(raw.get(BASE_KEY), dict) else {}
    own.update(overrides or {})
    name = own.get("base")
    if not name:
        return None
    replace = own.get("replace") or []
    if not (isinstance(replace, list) and all(isinstance(r, str) for r in replace)):
        raise ConfigError(f"{BASE_KEY}.replace={replace!r}: expected a list of section names", "e.g. [env]")
    return base_recipe(str(name), replace)
