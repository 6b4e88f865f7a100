# CMake toolchain file: build for wasm32-wasi with clang.wasm, run by wasm9p.
#
#   WASM9P_ROOT=$PWD cmake -B build -DCMAKE_TOOLCHAIN_FILE=/path/to/wasm32-wasi-wasm9p.cmake
#   WASM9P_ROOT=$PWD cmake --build build -j2
#
# WASM9P_ROOT (or the directory cmake runs in) is the project root the compiler sees:
# the sources and the build directory must both be under it. The compiles go through
# the user's `wasm9p daemon` for the root, started by the first one (WASM9P_DAEMON=off
# compiles each in its own process; unix:PATH names a daemon of your own).
#
# The programs built are run by `wasm9p run --root` (CMAKE_CROSSCOMPILING_EMULATOR):
# `ctest` runs each add_test through it, the test in its working directory with the
# project root at its own path, so relative paths mean what they mean on the host.
# The root for that is WASM9P_ROOT when cmake configures, else the deepest directory
# holding both the source and the build tree (WASM9P_RUN_ROOT overrides both).
#
# CMake wants one executable per tool, so this file makes links to wasm9p named after
# them (wasm32-wasi-cc, -c++, -ar, -ranlib) in WASM9P_LINKS (default
# ~/.cache/wasm9p/links); wasm9p is found on PATH unless WASM9P names it.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR wasm32)
# Generic resets CMAKE_EXECUTABLE_SUFFIX; the per-language ones stand.
set(CMAKE_EXECUTABLE_SUFFIX_C .wasm)
set(CMAKE_EXECUTABLE_SUFFIX_CXX .wasm)

if(NOT WASM9P)
  find_program(WASM9P wasm9p REQUIRED)
endif()
if(NOT WASM9P_LINKS)
  set(WASM9P_LINKS "$ENV{HOME}/.cache/wasm9p/links")
endif()
if(NOT WASM9P_RUN_ROOT)
  if(NOT "$ENV{WASM9P_ROOT}" STREQUAL "")
    get_filename_component(WASM9P_RUN_ROOT "$ENV{WASM9P_ROOT}" REALPATH)
  else()
    get_filename_component(WASM9P_RUN_ROOT "${CMAKE_SOURCE_DIR}" REALPATH)
    get_filename_component(_wasm9p_binary "${CMAKE_BINARY_DIR}" REALPATH)
    string(FIND "${_wasm9p_binary}/" "${WASM9P_RUN_ROOT}/" _wasm9p_at)
    while(NOT _wasm9p_at EQUAL 0 AND NOT WASM9P_RUN_ROOT STREQUAL "/")
      get_filename_component(WASM9P_RUN_ROOT "${WASM9P_RUN_ROOT}" DIRECTORY)
      string(FIND "${_wasm9p_binary}/" "${WASM9P_RUN_ROOT}/" _wasm9p_at)
    endwhile()
  endif()
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR "${WASM9P};run;--root;${WASM9P_RUN_ROOT}")
# try_compile projects read this file again: they need the same three.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES WASM9P WASM9P_LINKS WASM9P_RUN_ROOT)

file(MAKE_DIRECTORY "${WASM9P_LINKS}")
foreach(tool cc c++ ar ranlib)
  file(CREATE_LINK "${WASM9P}" "${WASM9P_LINKS}/wasm32-wasi-${tool}" SYMBOLIC)
endforeach()
set(CMAKE_C_COMPILER "${WASM9P_LINKS}/wasm32-wasi-cc")
set(CMAKE_CXX_COMPILER "${WASM9P_LINKS}/wasm32-wasi-c++")
set(CMAKE_AR "${WASM9P_LINKS}/wasm32-wasi-ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "${WASM9P_LINKS}/wasm32-wasi-ranlib" CACHE FILEPATH "")
