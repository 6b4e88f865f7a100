"""`clang_wasm`: the repository holding clang.wasm, its sysroot and its toolchains.

clang.wasm and its sysroot are toolchain files: inputs of every compile, archive and
link, by path in the execution root (`external/<name>/...`), so a remote action
carries them in its input root, by digest, like any source. A farm's CAS stores them
once, and a `wasm9p worker` fetches a file of them the first time a guest reads it
and never again (clang.wasm itself, and the twenty or so headers a compile opens of
the sysroot's 2,345 files).

The repository has, from the toolchain directory (`WASM9P_TOOLCHAIN`, else what
`scripts/fetch-clang-wasm` fetches, fetching it if need be):
- `llvm.core.wasm` and `sysroot/` (`usr/include`, `usr/lib`), copied;
- `wasi/clang`, `wasi/ar`, ...: links to clang.wasm under each tool's name, what a
  worker runs;
- `runner/test` (`:test_runner`): what a wasm test runs under here (`--run_under`),
  `wasm9p run` on the same root with the test's variables;
- `host/clang`, `host/ar`, ...: scripts that run the same tools through `wasm9p cc`
  here (the `wasm9p` of `WASM9P`, else the one on PATH), made for this machine: the
  guest sees the directory that holds the workspace and Bazel's output base at its
  own path (the execution root's inputs are links into them), and
  the scripts carry the variables `wasm9p cc` reads (HOME, XDG_RUNTIME_DIR, the
  module cache's) that Bazel does not pass to actions. Bazel stops whatever an
  action leaves running, so no daemon can start itself from one: the tools run in
  each action's process (`WASM9P_DAEMON=off`), or in the daemon `WASM9P_DAEMON`
  names when the repository is made (`wasm9p daemon --listen unix:PATH --root DIR`,
  started outside Bazel).
"""

_TOOLS = ["clang", "clang++", "wasm-ld", "ar", "nm", "objdump", "strip"]

# The variables a host script keeps from the environment the repository was made in.
_KEPT = [
    "HOME",
    "XDG_RUNTIME_DIR",
    "XDG_CACHE_HOME",
    "WASM9P_CACHE_DIR",
    "WASM9P_DAEMON",
    "WASM9P_DAEMON_IDLE_TIMEOUT",
]

def _real(rctx, path):
    result = rctx.execute(["realpath", str(path)])
    if result.return_code != 0:
        fail("cannot resolve {}: {}".format(path, result.stderr))
    return result.stdout.strip()

def _common_dir(paths):
    parts = [p.split("/") for p in paths]
    common = []
    for i in range(min([len(p) for p in parts])):
        names = {p[i]: True for p in parts}
        if len(names) != 1:
            break
        common.append(parts[0][i])
    return "/".join(common) or "/"

def _quote(s):
    return "'" + s.replace("'", "'\\''") + "'"

def _toolchain_dir(rctx):
    given = rctx.os.environ.get("WASM9P_TOOLCHAIN", "")
    if given:
        return _real(rctx, given)
    # This repository is examples/bazel of a wasm9p checkout.
    here = _real(rctx, rctx.path(Label("@wasm9p//:WORKSPACE")))
    fetch = here.rsplit("/", 3)[0] + "/scripts/fetch-clang-wasm"
    result = rctx.execute([fetch], timeout = 1800)
    if result.return_code != 0:
        fail("scripts/fetch-clang-wasm failed (set WASM9P_TOOLCHAIN to a toolchain " +
             "directory instead):\n" + result.stderr)
    return _real(rctx, result.stdout.strip().splitlines()[-1])

def _wasm9p(rctx):
    given = rctx.os.environ.get("WASM9P", "")
    found = rctx.which("wasm9p") if not given else rctx.path(given)
    if not found or not found.exists:
        fail("no wasm9p: put it on PATH or set WASM9P to its path " +
             "(cargo build --release -p wasm9p-cli makes target/release/wasm9p)")
    return _real(rctx, found)

def _clang_wasm_impl(rctx):
    toolchain = _toolchain_dir(rctx)
    module = toolchain + "/llvm.core.wasm"
    if not rctx.path(module).exists or not rctx.path(toolchain + "/sysroot/usr").exists:
        fail("no clang.wasm toolchain in {} (llvm.core.wasm and sysroot/usr)".format(toolchain))
    # Copied, not linked: what a guest reads here is then inside Bazel's output base.
    copied = rctx.execute(["cp", "-R", "--reflink=auto", module, toolchain + "/sysroot", "."])
    if copied.return_code != 0:
        fail("cannot copy the toolchain from {}: {}".format(toolchain, copied.stderr))
    for tool in _TOOLS:
        rctx.symlink("llvm.core.wasm", "wasi/" + tool)

    wasm9p = _wasm9p(rctx)
    workspace = _real(rctx, rctx.path(Label("@//:WORKSPACE")).dirname)
    output_base = _real(rctx, rctx.path(".").dirname.dirname)
    root = _common_dir([workspace, output_base])
    if root == "/" or root == "/usr" or root.startswith("/usr/"):
        fail(("the workspace ({}) and Bazel's output base ({}) share no directory " +
              "wasm9p cc can take as its root (not / nor under /usr): give Bazel an " +
              "--output_user_root next to the workspace").format(workspace, output_base))
    here = _real(rctx, rctx.path("."))
    kept = {k: rctx.os.environ[k] for k in _KEPT if rctx.os.environ.get(k)}

    # Bazel stops every process an action leaves behind, so a daemon started by one
    # would die with it: each action's tool runs in its own process, unless a daemon
    # started outside Bazel is named.
    kept.setdefault("WASM9P_DAEMON", "off")
    env = " ".join([k + "=" + _quote(v) for k, v in kept.items()])
    for tool in _TOOLS:
        rctx.file("host/" + tool, "\n".join([
            "#!/bin/sh",
            "# clang.wasm's {} through wasm9p cc, made for this machine by @wasm9p//:defs.bzl".format(tool),
            "exec env {} {} {} --root {} --toolchain {} \"$@\"".format(
                env,
                _quote(wasm9p),
                tool,
                _quote(root),
                _quote(here),
            ),
            "",
        ]), executable = True)

    # Bazel's test-setup.sh runs a test's binary itself, and this machine cannot run a
    # wasm file: under `test:wasm9p --run_under=@<name>//:test_runner` it runs this,
    # which runs the test as a guest of `wasm9p run` on the same root, in the test's
    # runfiles, with the test's variables (a worker does the script's part itself).
    rctx.file("runner/test", "\n".join([
        "#!/bin/bash",
        "# A wasm test binary as a guest of wasm9p run, made for this machine by @wasm9p//:defs.bzl",
        "args=()",
        "while IFS= read -r -d '' entry; do",
        "  case \"$entry\" in",
        "    TEST_*=* | XML_OUTPUT_FILE=* | RUNFILES_*=* | TZ=* | GTEST_*=*) args+=(--env \"$entry\") ;;",
        "  esac",
        "done < <(env -0)",
        "exec env {} {} run --root {} \"${{args[@]}}\" \"$@\"".format(env, _quote(wasm9p), _quote(root)),
        "",
    ]), executable = True)

    rctx.template(
        "BUILD.bazel",
        Label("@wasm9p//toolchain:clang_wasm.BUILD"),
        {"{repo}": rctx.name},
    )
    rctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(rctx.name))

clang_wasm = repository_rule(
    implementation = _clang_wasm_impl,
    local = True,
    environ = ["WASM9P", "WASM9P_TOOLCHAIN", "WASM9P_FETCH_CACHE", "PATH"] + _KEPT,
)
