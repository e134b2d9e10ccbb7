# Source this on the TPU machine, from the repository root:  . scripts/tpu/setup.sh
# Installs torch (CPU build), transformers (pyproject's tested range: the suite pins counts of
# generate() that other releases change), tqdm, psutil, accelerate, matplotlib, expecttest
# and hypothesis from the machine's own index into
# /tmp/site (once per machine), then puts the machine's JAX first, lazyxla next, pip's last.
export PYTHONUNBUFFERED=1
if [ ! -d /tmp/site/torch ]; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: \
    --index-url file:///opt/pypi/simple --target /tmp/site \
    torch==2.13.0 --find-links /opt/wheels "transformers>=5.24,<6" tqdm psutil ${LAZYXLA_TPU_EXTRA_PACKAGES:-} 2>&1 | grep -E "ERROR"
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
