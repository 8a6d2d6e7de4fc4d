# Precompiled headers for the targets that compile many files against the same heavy
# header-only libraries (CLI11, nlohmann/json, spdlog, GoogleTest, pybind11). CI compiles
# the tree four times on two cores (RelWithDebInfo, Release, ASan, TSan), and parsing those
# headers again in every file was a third of each compile. KVPOOL_PCH=OFF builds without
# them: each file must still include what it uses (the Python package's own builds, which
# compile its files by hand, and a KVPOOL_PCH=OFF build check that).
# Not kvpool-replay: with json precompiled, g++ 12 -O3 inlines differently and raises a
# false -Warray-bounds in tools/replay/coordinator.cpp (Release, -Werror).
option(KVPOOL_PCH "Precompile heavy third-party headers for multi-file targets" ON)
# The same targets as one or two unity files each: the header-only libraries' inline code
# (CLI11's App, json's templates, GoogleTest's registration) is then generated once per
# target instead of once per file. kvpoolctl_lib compiles in 44 CPU-s instead of 222 (g++ 12,
# Release). Off by default, so an edit recompiles one file; scripts/test.sh (CI) turns it on.
# Files of one target therefore must not define the same name in anonymous namespaces.
option(KVPOOL_UNITY "Compile each multi-file heavy target as unity files (scripts/test.sh)" OFF)

# kvpool_pch(<target> <header>...): headers as written in an #include, e.g. <CLI/CLI.hpp>.
# C++ files only (a target may also hold C files).
function(kvpool_pch target)
  if(KVPOOL_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
  endif()
  if(NOT KVPOOL_PCH)
    return()
  endif()
  set(headers)
  foreach(h IN LISTS ARGN)
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${h}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
