# CMake toolchain file: build for wasm32-wasi with clang.wasm, run by wasm9p.
#
#   WASM9P_ROOT=$PWD cmake -B build -DCMAKE_TOOLCHAIN_FILE=/path/to/wasm32-wasi-wasm9p.cmake
#   WASM9P_ROOT=$PWD cmake --build build -j2
#
# WASM9P_ROOT (or the directory cmake runs in) is the project root the compiler sees:
# the sources and the build directory must both be under it. Set WASM9P_DAEMON to
# unix:PATH to compile through a running `wasm9p daemon`.
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
# try_compile projects read this file again: they need the same two.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES WASM9P WASM9P_LINKS)

file(MAKE_DIRECTORY "${WASM9P_LINKS}")
foreach(tool cc c++ ar ranlib)
  file(CREATE_LINK "${WASM9P}" "${WASM9P_LINKS}/wasm32-wasi-${tool}" SYMBOLIC)
endforeach()
set(CMAKE_C_COMPILER "${WASM9P_LINKS}/wasm32-wasi-cc")
set(CMAKE_CXX_COMPILER "${WASM9P_LINKS}/wasm32-wasi-c++")
set(CMAKE_AR "${WASM9P_LINKS}/wasm32-wasi-ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "${WASM9P_LINKS}/wasm32-wasi-ranlib" CACHE FILEPATH "")
