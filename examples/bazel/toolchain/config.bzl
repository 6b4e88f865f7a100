"""The C/C++ toolchain configuration of clang.wasm for wasm32-wasip1.

One configuration, instantiated twice by the `clang_wasm` repository (see defs.bzl):
its tools are the files of `tools_dir`, either `wasi/` (clang.wasm itself, one file per
tool name, for `wasm9p worker`s: a worker runs a wasm file named `clang` as clang) or
`host/` (scripts that run the same module through `wasm9p cc` on this machine). The
flags are the same either way, so a remote build and a local one make the same bytes:

- the sysroot and clang's resource directory are the repository's `sysroot/usr`,
  given by a path relative to the execution root, as every other input is: the
  compiler reads headers from the action's inputs wherever it runs, and the `.d` files
  Bazel checks included headers with name them as declared inputs;
- nothing in an output depends on where the build ran: `-fdebug-compilation-dir=.`
  for debug info, and the date and time macros redacted.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load(
    "@bazel_tools//tools/cpp:cc_toolchain_config_lib.bzl",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
)

_COMPILE = [
    ACTION_NAMES.assemble,
    ACTION_NAMES.preprocess_assemble,
    ACTION_NAMES.c_compile,
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
]

_CPP_COMPILE = [
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
]

_LINK = [
    ACTION_NAMES.cpp_link_executable,
    ACTION_NAMES.cpp_link_dynamic_library,
    ACTION_NAMES.cpp_link_nodeps_dynamic_library,
]

# Tool names as Bazel knows them, and the clang.wasm tool each file is named after.
_TOOLS = {
    "gcc": "clang",
    "cpp": "clang",
    "ld": "wasm-ld",
    "ar": "ar",
    "nm": "nm",
    "objdump": "objdump",
    "strip": "strip",
    "gcov": "clang",
}

def _flags(actions, flags):
    return flag_set(actions = actions, flag_groups = [flag_group(flags = flags)])

def _impl(ctx):
    sysroot = ctx.attr.sysroot
    target = [
        "--target=wasm32-wasip1",
        "-resource-dir=" + sysroot,
    ]
    features = [
        feature(
            name = "wasm32_wasip1",
            enabled = True,
            flag_sets = [
                _flags(_COMPILE, target + [
                    "-fdebug-compilation-dir=.",
                    "-Wno-builtin-macro-redefined",
                    "-D__DATE__=\"redacted\"",
                    "-D__TIMESTAMP__=\"redacted\"",
                    "-D__TIME__=\"redacted\"",
                ]),
                # WASI preview 1 has no exceptions.
                _flags(_CPP_COMPILE, ["-fno-exceptions"]),
                _flags(_LINK, target),
            ],
        ),
        # C++ programs link libc++; a C program pulls nothing from them.
        feature(
            name = "libcxx",
            enabled = True,
            flag_sets = [_flags(_LINK, ["-lc++", "-lc++abi"])],
        ),
        feature(name = "opt", flag_sets = [_flags(_COMPILE, ["-O2", "-DNDEBUG"])]),
        feature(name = "dbg", flag_sets = [_flags(_COMPILE, ["-O0", "-g"])]),
        feature(name = "fastbuild", flag_sets = [_flags(_COMPILE, ["-O1"])]),
    ]
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        features = features,
        toolchain_identifier = "clang_wasm_" + ctx.attr.tools_dir,
        host_system_name = "local",
        target_system_name = "wasm32-wasip1",
        target_cpu = "wasm32",
        target_libc = "wasi",
        compiler = "clang",
        abi_version = "wasip1",
        abi_libc_version = "wasip1",
        builtin_sysroot = sysroot,
        tool_paths = [
            tool_path(name = name, path = ctx.attr.tools_dir + "/" + tool)
            for name, tool in _TOOLS.items()
        ],
    )

wasm9p_cc_toolchain_config = rule(
    implementation = _impl,
    attrs = {
        "tools_dir": attr.string(mandatory = True, values = ["wasi", "host"]),
        "sysroot": attr.string(mandatory = True),
    },
    provides = [CcToolchainConfigInfo],
)
