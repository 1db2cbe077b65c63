# gpuguard build. `make` builds the shim and the command; `make test` runs every test on a machine
# without a GPU (test doubles of the driver, cuDNN and NVML stand in); `make demo` shows the main job.
#
# Sources are picked up by folder, so adding a file needs no edit here:
#   common/**/*.cpp         -> build/libgpuguard_common.a   (shared by the shim and the command)
#   shim/**/*.cpp, *.S      -> build/libgpuguard.so          (the preload library; shim/hooks/ holds its entry points)
#   tools/**/*.cpp          -> build/gpuguard                (the command)
#   tests/unit/*.cpp        -> build/tests/unit              (doctest; links common + the shim's core)
#   tests/fake/fake_X.cpp   -> build/fake/<soname of X>      (test doubles of libcuda, cuDNN, NVML, cudart)
#   tests/integration/*.c*  -> build/tests/bin/<name>        (programs run under the shim)
#
# Sanitizers: `make test SANITIZE=address,undefined` and `make test SANITIZE=thread` build everything
# (shim, command, test doubles, test programs) with the sanitizer into a folder of their own
# (build-asan, build-tsan; BUILD=... overrides), so they never mix objects with the plain build.
# The shim links the sanitizer's shared runtime, which must be loaded before libc in any process
# that preloads the shim: tests/sanitize_env.sh preloads it ahead of the shim (LD_PRELOAD=
# "<runtime>:libgpuguard.so") for the programs the tests run, collects every sanitizer report in a
# file so that a report fails its check, and turns leak detection on for this project's programs.
# By hand: LD_PRELOAD="$(gcc -print-file-name=libasan.so):build-asan/libgpuguard.so" prog (likewise
# libtsan.so). A static runtime is no option: GCC links libasan.a/libtsan.a into executables only.

CUDA_HOME ?= /usr/local/cuda
PREFIX    ?= /usr/local
SANITIZE  ?=
# PROFILE=1: the shim with step timers (shim/base/profile.h), built into build-profile; for finding where
# a hook's time goes on the GPU machine, which has no perf.
PROFILE   ?=
ifneq ($(PROFILE),)
  BUILD   ?= build-profile
endif
ifneq ($(filter address%,$(SANITIZE)),)
  BUILD   ?= build-asan
else ifeq ($(SANITIZE),thread)
  BUILD   ?= build-tsan
else ifneq ($(SANITIZE),)
  BUILD   ?= build-san
endif
BUILD     ?= build

CXX       ?= g++
CC        ?= gcc
WARN      := -Wall -Wextra
CPPFLAGS  := -I. -Iinclude -I$(CUDA_HOME)/include -D_GNU_SOURCE
CXXFLAGS  ?= -O2 -g
# -fno-plt: calls into libc go through the GOT, with no PLT stub on a page of its own to fetch on
# every hooked call (the shim links with -z now, so nothing is bound lazily anyway).
CXXFLAGS  += -std=c++17 -fPIC -fvisibility=hidden -fno-plt $(WARN) -pthread
CFLAGS    ?= -O2 -g
CFLAGS    += -std=c11 -fPIC $(WARN) -pthread
ifneq ($(PROFILE),)
  CPPFLAGS += -DGG_PROFILE
endif
ifneq ($(SANITIZE),)
  SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
  CXXFLAGS += $(SANFLAGS)
  CFLAGS   += $(SANFLAGS)
  LDFLAGS  += $(SANFLAGS)
endif

# common/floor/ is not in the common library: it is linked into the shipped binaries alone (below).
COMMON_SRC := $(sort $(shell find common -name '*.cpp' -not -path 'common/floor/*'))
# The shim's entry points (exported hooks, the dlsym and cuGetProcAddress interposers) are kept apart
# from its core so that unit tests can link the core without interposing anything in the test process.
SHIM_ENTRY := $(wildcard shim/hooks/*.cpp shim/hooks/*.S)
SHIM_CORE  := $(filter-out $(SHIM_ENTRY),$(sort $(shell find shim -name '*.cpp')))
TOOL_SRC   := $(sort $(shell find tools -name '*.cpp'))
UNIT_SRC   := $(wildcard tests/unit/*.cpp)
INTEG_SRC  := $(wildcard tests/integration/*.c tests/integration/*.cpp)

obj = $(patsubst %,$(BUILD)/obj/%.o,$(1))

LIB        := $(BUILD)/libgpuguard.so
UNWIND_SO  := $(BUILD)/libunwind.so.8
COMMON_LIB := $(BUILD)/libgpuguard_common.a
CORE_LIB   := $(BUILD)/libgpuguard_core.a
CLI        := $(BUILD)/gpuguard
UNIT       := $(BUILD)/tests/unit
# Each test double whose source exists (tests/fake/fake_<lib>.cpp -> the soname of <lib>).
FAKES      := $(if $(wildcard tests/fake/fake_cuda.cpp),$(BUILD)/fake/libcuda.so.1) \
              $(if $(wildcard tests/fake/fake_cudnn.cpp),$(BUILD)/fake/libcudnn.so.9) \
              $(if $(wildcard tests/fake/fake_nvml.cpp),$(BUILD)/fake/libnvidia-ml.so.1) \
              $(if $(wildcard tests/fake/fake_cudart.cpp),$(BUILD)/fake/libcudart.so.13) \
              $(if $(wildcard tests/fake/fake_c10.cpp),$(BUILD)/fake/libc10.so) \
              $(if $(wildcard tests/fake/fake_c10_cuda.cpp),$(BUILD)/fake/libc10_cuda.so)
INTEG_BIN  := $(patsubst tests/integration/%,$(BUILD)/tests/bin/%,$(basename $(INTEG_SRC)))

.PHONY: all test unit-test integration-test demo deps install clean bench gpu-test gpu-bench container-test fuzz soak wheel deb pyroot
all: deps-check $(LIB) $(UNWIND_SO) $(CLI)

# Installs the Debian packages the build needs when one is missing (CI and a fresh machine).
deps:
	@tests/deps.sh
deps-check:
	@tests/deps.sh --quiet

# Order-only on deps-check: with -j, nothing compiles before the Debian packages are in place.
$(BUILD)/obj/%.o: % | deps-check
	@mkdir -p $(dir $@)
	$(if $(filter %.c,$<),$(CC) $(CPPFLAGS) $(CFLAGS),$(if $(filter %.S,$<),$(CC) $(CPPFLAGS) $(SANFLAGS) -g,$(CXX) $(CPPFLAGS) $(CXXFLAGS))) -MMD -MP -c $< -o $@

$(COMMON_LIB): $(call obj,$(COMMON_SRC))
	@rm -f $@; ar rcs $@ $^
$(CORE_LIB): $(call obj,$(SHIM_CORE))
	@rm -f $@; ar rcs $@ $^

# The glibc floor (common/floor/glibc.def): the shipped binaries (the shim, its libunwind, the command)
# load on glibc 2.17 and newer. Every glibc symbol newer than that is linked with --wrap to an old
# version of it or to our own definition, and libdl.so.2 and libpthread.so.0 are named, where glibc
# before 2.34 keeps dlopen and pthread_create. tests/integration/t_floor.sh reads what each binary asks
# for. Sanitized builds keep the build machine's glibc (their runtimes need it anyway).
comma           := ,
FLOOR_NAMES     := ${shell sed -nE 's/^(BIND|OWN)\(([A-Za-z0-9_]+).*/\2/p' common/floor/glibc.def}
FLOOR_EXE_NAMES := ${shell sed -nE 's/^OWN_EXE\(([A-Za-z0-9_]+).*/\1/p' common/floor/glibc.def}
ifeq ($(SANITIZE),)
  FLOOR_OBJ      := $(call obj,common/floor/bind.S common/floor/own.cpp)
  FLOOR_EXE_OBJ  := $(call obj,common/floor/start.cpp)
  FLOOR_LDFLAGS  := $(FLOOR_OBJ) $(patsubst %,-Wl$(comma)--wrap=%,$(FLOOR_NAMES)) \
                    -Wl,--push-state,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--pop-state
  FLOOR_EXE_LDFLAGS := $(FLOOR_EXE_OBJ) $(patsubst %,-Wl$(comma)--wrap=%,$(FLOOR_EXE_NAMES)) $(FLOOR_LDFLAGS)
endif

# The shim never links libcuda, cuDNN, NVML or libunwind: it finds them at run time, so that it
# loads in any container (docs/platform-facts.md: a preload library with a missing DT_NEEDED is silently skipped).
# -Bsymbolic binds the shim's own calls to its own definitions; -z nodelete keeps it mapped even if
# a program dlcloses it while a hook is on some thread's stack. shim/hooks/exports.map exports the hooks and
# the API only: the static libstdc++ and libgcc, and templates instantiated here, stay private.
$(LIB): $(call obj,$(SHIM_ENTRY)) $(CORE_LIB) $(COMMON_LIB) shim/hooks/exports.map $(FLOOR_OBJ) common/floor/glibc.def
	$(CXX) -shared -o $@ $(call obj,$(SHIM_ENTRY)) -Wl,--whole-archive $(CORE_LIB) -Wl,--no-whole-archive \
	  $(COMMON_LIB) $(FLOOR_LDFLAGS) $(LDFLAGS) -Wl,-Bsymbolic -Wl,-z,nodelete -Wl,-z,now -static-libstdc++ -static-libgcc \
	  -Wl,--version-script=shim/hooks/exports.map -ldl -pthread

# libunwind is shipped beside the shim, where shim/stacks/unwind.cpp dlopens it first: the GPU
# machine and many container images have none installed (docs/platform-facts.md). libgcc's unwinder is the
# fallback. The system's libunwind.so.8 asks for glibc 2.34, so the shipped one is compiled here from
# Debian's source of the same version (packaging/libunwind/fetch.sh) with the glibc floor.
# UNWIND_FROM=system copies the machine's instead (sanitized builds do: the floor is not theirs).
UNWIND_FROM ?= $(if $(SANITIZE),system,source)
ifeq ($(UNWIND_FROM),system)
$(UNWIND_SO): /usr/lib/x86_64-linux-gnu/libunwind.so.8 | deps-check
	@mkdir -p $(dir $@)
	cp -L $< $@
else
include packaging/libunwind/sources.mk
UW         := $(BUILD)/libunwind
UW_OBJ     := $(patsubst %,$(UW)/obj/%.o,$(UNWIND_SOURCES))
UW_FLAGS   := -O2 -g -fPIC -fexceptions -w -DHAVE_CONFIG_H -D_GNU_SOURCE -DNDEBUG -I$(UW)/gen -I$(UW)/src/include \
              -I$(UW)/src/include/tdep-x86_64 -I$(UW)/src/src
$(UW)/version: packaging/libunwind/fetch.sh packaging/libunwind/config.h | deps-check
	packaging/libunwind/fetch.sh $(UW)
# libunwind's own code, compiled as its Makefile does; its warnings are not this project's to fix (-w).
$(UW)/obj/%.o: $(UW)/version
	@mkdir -p $(dir $@)
	$(CC) $(UW_FLAGS) -c $(UW)/src/src/$* -o $@
$(UNWIND_SO): $(UW_OBJ) $(FLOOR_OBJ) common/floor/glibc.def
	$(CC) -shared -o $@ $(UW_OBJ) -Wl,-soname,libunwind.so.8 $(FLOOR_LDFLAGS) -static-libgcc
endif

# The command links its C++ runtime statically, as the shim does: a libstdc++.so.6 as new as the build
# machine's is not in the images it runs in.
$(CLI): $(call obj,$(TOOL_SRC)) $(COMMON_LIB) $(BUILD)/tools/embedded.o $(FLOOR_EXE_OBJ) $(FLOOR_OBJ) common/floor/glibc.def
	$(CXX) -o $@ $(call obj,$(TOOL_SRC)) $(COMMON_LIB) $(BUILD)/tools/embedded.o $(FLOOR_EXE_LDFLAGS) $(LDFLAGS) \
	  -static-libstdc++ -static-libgcc -ldl -pthread

# The HTML viewer's page, script and style live in tools/report/web/ as real files and are embedded here.
# The script is embedded after the row layouts of common/report/schema.h, made into JavaScript
# (COLUMN.<row>.<column>) by tools/report/schema_js.py, so that it reads a row as the command does.
WEB_FILES := $(wildcard tools/report/web/*)
WEB_SCRIPT_DEPS := tools/report/web/report.js common/report/schema.h tools/report/schema_js.py
web_embedded = $(filter-out tools/report/web/report.js,$(WEB_FILES)) $(1)/tools/web/report.js
%/tools/web/report.js: $(WEB_SCRIPT_DEPS)
	@mkdir -p $(dir $@)
	python3 tools/report/schema_js.py common/report/schema.h > $@.tmp
	cat tools/report/web/report.js >> $@.tmp
	mv $@.tmp $@
$(BUILD)/tools/embedded.o: $(call web_embedded,$(BUILD)) tools/report/embed.sh
	@mkdir -p $(dir $@)
	tools/report/embed.sh $(BUILD)/tools/embedded.cpp $(call web_embedded,$(BUILD))
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $(BUILD)/tools/embedded.cpp -o $@

# Test doubles: each is a shared library with the soname of the library it stands in for.
$(BUILD)/fake/libcuda.so.1: $(call obj,tests/fake/fake_cuda.cpp tests/fake/fake_cuda_usage.cpp)
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -ldl -pthread -lrt
	@ln -sf libcuda.so.1 $(BUILD)/fake/libcuda.so
# The test cuDNN keeps cuDNN 9's shape (tests/fake/fake_cudnn.h): a dispatcher and the sub-libraries it
# dlopens, with symbol versions named after each soname as cuDNN's are, so that linked programs carry
# versioned references like PyTorch's.
CUDNN_PARTS := $(BUILD)/fake/libcudnn_graph.so.9 $(BUILD)/fake/libcudnn_cnn.so.9
$(BUILD)/fake/libcudnn.so.9: $(call obj,tests/fake/fake_cudnn.cpp) | $(CUDNN_PARTS)
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,libcudnn.so.9 -Wl,--default-symver -Wl,-Bsymbolic -ldl -pthread
	@ln -sf libcudnn.so.9 $(BUILD)/fake/libcudnn.so
$(BUILD)/fake/libcudnn_graph.so.9: $(call obj,tests/fake/fake_cudnn_graph.cpp)
$(BUILD)/fake/libcudnn_cnn.so.9: $(call obj,tests/fake/fake_cudnn_cnn.cpp)
$(CUDNN_PARTS):
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,$(notdir $@) -Wl,--default-symver -Wl,-Bsymbolic -ldl -pthread
$(BUILD)/fake/libnvidia-ml.so.1: $(call obj,tests/fake/fake_nvml.cpp)
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 -Wl,-Bsymbolic -ldl -pthread
	@ln -sf libnvidia-ml.so.1 $(BUILD)/fake/libnvidia-ml.so
$(BUILD)/fake/libcudart.so.13: $(call obj,tests/fake/fake_cudart.cpp)
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,libcudart.so.13 -Wl,-Bsymbolic -ldl -pthread
	@ln -sf libcudart.so.13 $(BUILD)/fake/libcudart.so

# The doubles of PyTorch's c10 libraries: libc10.so defines the two profiler functions; libc10_cuda.so
# hands out blocks with the what-if's model of the caching allocator (tools/report/whatif/), gets its
# segments from the test driver, and imports the profiler functions from libc10.so through its PLT
# (-fplt undoes the project's -fno-plt there), as PyTorch's does, so that a preloaded shim's definitions win.
$(BUILD)/fake/libc10.so: $(call obj,tests/fake/fake_c10.cpp)
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,libc10.so -pthread
C10_CUDA_OBJ := $(call obj,tests/fake/fake_c10_cuda.cpp tools/report/whatif/allocator_model.cpp)
$(BUILD)/fake/libc10_cuda.so: $(C10_CUDA_OBJ) $(BUILD)/fake/libc10.so $(BUILD)/fake/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $(C10_CUDA_OBJ) $(LDFLAGS) -Wl,-soname,libc10_cuda.so -L$(BUILD)/fake -lc10 -lcuda \
	  -Wl,-rpath,'$$ORIGIN' -pthread
$(BUILD)/obj/tests/fake/fake_c10_cuda.cpp.o: CXXFLAGS += -fplt

# The unit tests also link the command's report reader and analysis: to read back what the shim's
# writer wrote, and to test the diagnosis and the what-if (tools/report/whatif/) on reports made up in
# the test; and the exporter's metrics, to render ledger snapshots no running process can produce.
UNIT_TOOLS := tools/report/load.cpp tools/report/model.cpp tools/report/phases.cpp tools/report/tensor.cpp tools/report/symbolize.cpp \
              $(sort $(wildcard tools/report/analysis/*.cpp tools/report/whatif/*.cpp)) tools/exporter/metrics.cpp tools/exporter/server.cpp
$(UNIT): $(call obj,$(UNIT_SRC) $(UNIT_TOOLS)) $(CORE_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $(call obj,$(UNIT_SRC) $(UNIT_TOOLS)) $(CORE_LIB) $(COMMON_LIB) $(LDFLAGS) -ldl -pthread -lrt -rdynamic

# The Python-frame tests (t_pyframes.sh) load this into a real interpreter through ctypes, which
# releases the GIL around the call as PyTorch does around an allocation.
PYPROBE_OBJ := $(call obj,$(wildcard tests/integration/pyprobe/*.cpp))
INTEG_BIN   += $(BUILD)/tests/libpyprobe.so
$(BUILD)/tests/libpyprobe.so: $(PYPROBE_OBJ) $(CORE_LIB) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $(PYPROBE_OBJ) $(CORE_LIB) $(COMMON_LIB) $(LDFLAGS) -ldl -pthread

# Integration programs: a name ending in _linked links the test driver directly (the first way a
# program reaches the driver); the others dlopen what they need.
$(BUILD)/tests/bin/%: $(BUILD)/obj/tests/integration/%.c.o $(FAKES)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS) $(if $(findstring _linked,$*),-L$(BUILD)/fake -lcuda -Wl$(comma)-rpath$(comma)'$$ORIGIN/../../fake') -ldl -pthread
$(BUILD)/tests/bin/%: $(BUILD)/obj/tests/integration/%.cpp.o $(FAKES)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $< $(LDFLAGS) $(if $(findstring _linked,$*),-L$(BUILD)/fake -lcuda -Wl$(comma)-rpath$(comma)'$$ORIGIN/../../fake') -ldl -pthread -rdynamic
# Keep the objects of test programs (make would delete them as intermediates and rebuild them next time).
.SECONDARY:
# The cuDNN test program links the test cuDNN as PyTorch links libcudnn.so.9 (private: not the fakes').
$(BUILD)/tests/bin/cudnn_linked: private LDFLAGS += -L$(BUILD)/fake -lcudnn
# Test programs export their functions so that reports can name them (dladdr sees only exports).
$(BUILD)/obj/tests/integration/%.o: CXXFLAGS += -fvisibility=default

unit-test: $(UNIT)
	$(UNIT)

integration-test: all $(FAKES) $(INTEG_BIN)
	@BUILD=$(BUILD) tests/integration/run.sh

test: deps-check all $(UNIT) $(FAKES) $(INTEG_BIN)
	@BUILD=$(BUILD) tests/run_all.sh

demo: deps-check all $(FAKES)
	@BUILD=$(BUILD) examples/demo.sh

# Benchmarks: tests/bench/*.c -> build/bench/<name>, linked to the driver's stub (soname libcuda.so.1),
# so that one binary runs against the test driver (LD_LIBRARY_PATH=build/fake) and the real driver.
BENCH_BIN := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/*.c))
$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.c.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $< $(LDFLAGS) -L$(CUDA_HOME)/lib64/stubs -lcuda -ldl -pthread

# The same program built with frame pointers, as Ubuntu 24.04's and Fedora's packages are: each frame's
# unwind rule reads two stack words, not one (the tensor view's row "built with frame pointers").
# Its object is compiled from bench_alloc.c (with its header dependencies); the rule above links it.
$(BUILD)/obj/tests/bench/bench_alloc_fp.c.o: tests/bench/bench_alloc.c | deps-check
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fno-omit-frame-pointer -MMD -MP -c $< -o $@

bench: all $(FAKES) $(BENCH_BIN) $(BUILD)/bench/bench_alloc_fp
	@tests/deps.sh --quiet --bench
	@BUILD=$(BUILD) tests/bench/run.sh

gpu-test: all
	@BUILD=$(BUILD) tests/gpu/run.sh

# Containers made as a runtime makes them (unshare + chroot into a debootstrap root): root and, the
# first time, the network; not in `make test` or .ci/run.
container-test: all $(FAKES) $(BUILD)/tests/bin/drv_linked $(BUILD)/tests/bin/fake_truth
	@BUILD=$(BUILD) tests/containers/run.sh

# The profiled shim (build-profile) times the shim's own share of each call in the training loop.
# The CPython releases newer than this machine's, in a Debian root (forky) that t_pyframes.sh runs its
# checks in where it exists: root and the network, once; not in `make test` or .ci/run.
pyroot:
	@tests/pyroot/make_root.sh

gpu-bench: all
	@$(MAKE) --no-print-directory PROFILE=1 BUILD=build-profile all
	@BUILD=$(BUILD) PROFILED=build-profile tests/bench/gpu_run.sh
	@BUILD=$(BUILD) PROFILED=build-profile tests/bench/gpu_tensor_inproc.sh

# Fuzzing: tests/fuzz/fuzz_<name>.cpp -> build-fuzz/fuzz_<name>, built with clang's libFuzzer under
# ASan and UBSan (any undefined behaviour stops the run, as a crash does), each run for FUZZ_SECONDS
# from its seed corpus tests/fuzz/corpus/<name>/ (tests/fuzz/run.sh). Its own folder and compiler,
# so that it never mixes objects with the gcc build.
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build-fuzz
FUZZ_CXX     ?= clang++
FUZZ_FLAGS   := -O1 -g -std=c++17 $(WARN) -pthread -fno-omit-frame-pointer -fno-sanitize-recover=all
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.cpp)
FUZZ_BIN     := $(patsubst tests/fuzz/%.cpp,$(FUZZ_BUILD)/%,$(FUZZ_SRC))
fuzz_obj      = $(patsubst %,$(FUZZ_BUILD)/obj/%.o,$(1))
# What each target links besides itself: the code it fuzzes and what that code calls.
FUZZ_DEPS_fuzz_size_spec := common/units/size_spec.cpp common/units/human.cpp
FUZZ_DEPS_fuzz_config    := $(COMMON_SRC) shim/core/config.cpp
FUZZ_DEPS_fuzz_ledger    := $(COMMON_SRC)
FUZZ_DEPS_fuzz_report    := $(COMMON_SRC) $(sort $(shell find tools/report -name '*.cpp')) tools/cli/text.cpp $(FUZZ_BUILD)/tools/embedded.cpp
FUZZ_DEPS_fuzz_cfi       := shim/stacks/cfi_walker.cpp
FUZZ_DEPS_fuzz_admission := $(COMMON_SRC)
FUZZ_DEPS_fuzz_whatif    := $(COMMON_SRC) tools/report/model.cpp $(sort $(wildcard tools/report/whatif/*.cpp))

$(FUZZ_BUILD)/obj/%.o: % | fuzz-check
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c $< -o $@
$(FUZZ_BUILD)/tools/embedded.cpp: $(call web_embedded,$(FUZZ_BUILD)) tools/report/embed.sh
	@mkdir -p $(dir $@)
	tools/report/embed.sh $@ $(call web_embedded,$(FUZZ_BUILD))
.SECONDEXPANSION:
$(FUZZ_BIN): $(FUZZ_BUILD)/%: $$(call fuzz_obj,tests/fuzz/$$*.cpp $$(FUZZ_DEPS_$$*))
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -o $@ $^ -ldl

.PHONY: fuzz-build fuzz-check
fuzz-build: fuzz-check $(FUZZ_BIN)
fuzz-check:
	@tests/deps.sh --quiet --fuzz
	@command -v $(FUZZ_CXX) >/dev/null && echo 'int main(){}' | $(FUZZ_CXX) -fsanitize=fuzzer-no-link -x c++ - -o /dev/null 2>/dev/null \
	  || { echo "gpuguard: make fuzz needs clang with libFuzzer (Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh $(notdir $(FUZZ_BIN))

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)

# Soak: hours of random allocation traffic from several processes under the ASan+UBSan shim, with
# kills and restarts, checked against the test driver's ground truth (tests/soak/run.sh builds its
# own sanitizer build in SOAK_BUILD through soak-bin, then runs the supervisor for SOAK_MINUTES).
SOAK_MINUTES ?= 120
SOAK_BUILD   ?= build-soak
SOAK_BIN     := $(BUILD)/tests/soak/soak $(BUILD)/tests/soak/soak_worker
.PHONY: soak-bin
soak-bin: all $(FAKES) $(SOAK_BIN)
$(BUILD)/tests/soak/soak_worker: $(call obj,tests/soak/soak_worker.cpp) $(FAKES)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $< $(LDFLAGS) -L$(BUILD)/fake -lcuda -Wl,-rpath,'$$ORIGIN/../../fake' -pthread
$(BUILD)/tests/soak/soak: $(call obj,tests/soak/soak.cpp) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CXX) -o $@ $^ $(LDFLAGS) -ldl -pthread
soak:
	@SOAK_BUILD=$(SOAK_BUILD) SOAK_MINUTES=$(SOAK_MINUTES) tests/soak/run.sh

# libunwind.so.8 goes to lib/gpuguard/, where the shim looks for it and no other program does; the
# binaries are stripped of what loading them does not need (`make install STRIP=` keeps it all); the
# man page is made from the command's help (packaging/deb/man.sh, as the .deb's).
STRIP ?= strip --strip-unneeded
install: all
	install -d $(DESTDIR)$(PREFIX)/lib/gpuguard $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/gpuguard \
	  $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0755 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 $(UNWIND_SO) $(DESTDIR)$(PREFIX)/lib/gpuguard/
	install -m 0755 $(CLI) $(DESTDIR)$(PREFIX)/bin/
	$(if $(STRIP),$(STRIP) $(DESTDIR)$(PREFIX)/lib/$(notdir $(LIB)) $(DESTDIR)$(PREFIX)/lib/gpuguard/$(notdir $(UNWIND_SO)) \
	  $(DESTDIR)$(PREFIX)/bin/$(notdir $(CLI)))
	install -m 0644 include/gpuguard/gpuguard.h $(DESTDIR)$(PREFIX)/include/gpuguard/
	packaging/deb/man.sh $(CLI) $(VERSION) > $(DESTDIR)$(PREFIX)/share/man/man1/gpuguard.1

# Packages, into dist/: `make wheel` the manylinux wheel (the shim, its libunwind, the command as the
# wheel's script, the Python package in python/gpuguard; packaging/wheel/build.py), `make deb` the
# Debian package (into /usr, with a man page; packaging/deb/build.sh). Both from the plain build, whose
# binaries load on glibc 2.17 and newer.
VERSION := ${shell sed -n 's/^\#define GPUGUARD_VERSION_STRING "\(.*\)"/\1/p' common/base/version.h}
DIST    ?= dist
wheel: all
	@python3 packaging/wheel/build.py $(BUILD) $(DIST) $(VERSION)
deb: all
	@packaging/deb/build.sh $(BUILD) $(DIST) $(VERSION)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
