# Source this on the TPU machine, from the repository root:  . scripts/tpu/setup.sh
# Installs torch (CPU build), tqdm, psutil, transformers (pyproject's tested range where the
# index has it: the suite pins counts of generate() that other releases change), accelerate,
# matplotlib, expecttest and hypothesis from the machine's own index into
# /tmp/site (once per machine), then puts the machine's JAX first, lazyxla next, pip's last.
export PYTHONUNBUFFERED=1
if [ ! -d /tmp/site/torch ]; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
    --index-url file:///opt/pypi/simple --target /tmp/site \
    torch==2.13.0 --find-links /opt/wheels tqdm psutil ${LAZYXLA_TPU_EXTRA_PACKAGES:-} 2>&1 | grep -E "ERROR"
fi
if [ ! -d /tmp/site/transformers ]; then
  # pyproject's range first; where the index cannot resolve it, its newest, said aloud (the
  # 2026-12-07 night run got 5.17 unpinned, and two generate() counter tests failed on it)
  for spec in "transformers>=5.24,<6" transformers; do
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
      --index-url file:///opt/pypi/simple --target /tmp/site "$spec" >/dev/null 2>&1 && break
  done
  python3 -c "import sys; sys.path.insert(0, '/tmp/site'); import transformers as t; v = t.__version__
print('setup.sh: transformers', v, '' if tuple(map(int, v.split('.')[:2])) >= (5, 24) else
      '(outside pyproject range >=5.24: the generate() counter tests pin 5.24+ counts)')" 2>&1 | tail -1
fi
if [ ! -d /tmp/site/accelerate ]; then   # the Trainer needs it; its own dependencies are there already
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: --no-deps \
    --index-url file:///opt/pypi/simple --target /tmp/site accelerate 2>&1 | grep -E "ERROR"
fi
for pkg in matplotlib expecttest hypothesis; do   # the bench's plot, the OpInfo database, property tests
  if [ ! -d "/tmp/site/$pkg" ]; then
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
      --index-url file:///opt/pypi/simple --target /tmp/site "$pkg" 2>&1 | grep -E "ERROR"
  fi
done
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD:/tmp/site
