# Sourced by scripts/run and scripts/test with the extras to install:
#   source scripts/bootstrap.sh web    # scripts/run: what `raftsched standalone` needs
#   source scripts/bootstrap.sh dev    # scripts/test: web, postgres and the test tools
# Makes ./.venv with raftsched (editable) and those extras. Idempotent and quick when nothing
# changed: a stamp per extras set records the pyproject.toml it installed; the dev stamp
# also satisfies the others (dev includes every extra).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"
EXTRAS="${1:?usage: source scripts/bootstrap.sh EXTRAS (e.g. web, or dev)}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "raftsched needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
stamp_ok() { [ -f "$VENV/.raftsched-installed-$1" ] && [ "$(cat "$VENV/.raftsched-installed-$1")" = "$WANT" ]; }
if ! stamp_ok "$EXTRAS" && ! stamp_ok dev; then
  echo "installing raftsched[$EXTRAS] into $VENV (first run, or pyproject.toml changed)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  # web/ installs as raftsched.web (package-dir), so setuptools makes the editable install
  # with an import hook and says so in a boxed "Editable installation." note: ours to know
  # (docs/architecture.md §2), not the newcomer's; every other warning still shows.
  PYTHONWARNINGS="ignore:Editable installation" \
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$EXTRAS]"
  echo "$WANT" > "$VENV/.raftsched-installed-$EXTRAS"
fi
unset -f stamp_ok
export PATH="$VENV/bin:$PATH"
