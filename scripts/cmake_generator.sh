# Sourced by scripts/test.sh and scripts/demo.sh: the CMake arguments for configuring a
# build folder. A new folder gets Ninja when it is installed; a folder configured before
# keeps its generator (CMake refuses to switch one: "Does not match the generator used
# previously") and its build type, so BUILD_DIR may point at any existing build.
generator_args() {
  if [ -f "$1/CMakeCache.txt" ]; then
    return 0
  fi
  if command -v ninja >/dev/null 2>&1; then
    echo "-G Ninja"
  fi
}
