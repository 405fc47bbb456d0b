"""Only allow-listed headers reach the compiler, however the directive is spelt; compiles see no host files;
compiler messages quote nothing from files other than the submitted one."""
from __future__ import annotations

import shutil

import pytest

from gpu_runner import compile_sandbox, compiler
from gpu_runner.compiler import compile_cubin, redact_foreign
from gpu_runner.directives import check_directives, find_forbidden_directive
from gpu_runner.guards import scan_source

SECRET = "kl_secret_7f3a9c"
KERNEL = 'extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'


def secret_file(tmp_path):
    path = tmp_path / "demo-credentials.txt"
    path.write_text(SECRET + "\n")
    return str(path)


def attacks(path: str, kernel: str = KERNEL) -> dict[str, str]:
    """The ways an include of `path` was smuggled past the old pattern guard, and the upload's original."""
    return {
        "in a function body": kernel + f'#define demo 1 +\n__global__ void p() {{ int a =\n#include "{path}"\n; }}\n',
        "relative climb": f"#include <../../../../..{path}>\n" + kernel,
        "through a macro": f'#define P "{path}"\n#include P\n' + kernel,
        "digraph": f'%:include "{path}"\n' + kernel,
        "#import": f'#import "{path}"\n' + kernel,
        "continued line": f'#include \\\n"{path}"\n' + kernel,
        "trigraph": f'??=include "{path}"\n' + kernel,
        "across a comment": f'#/* a\n */ include "{path}"\n' + kernel,
        "after a raw string": f'const char* s = R"x( " /* )x";\n#include "{path}"\n// */\n' + kernel,
        "absolute": f"#include <{path}>\n" + kernel,
        "include_next": f"#include_next <{path.lstrip('/')}>\n" + kernel,
        "__has_include": f"#if __has_include(<{path}>)\n#endif\n" + kernel,
    }


@pytest.mark.parametrize("name", list(attacks("/etc/passwd")))
def test_every_spelling_of_an_include_outside_the_allow_list_is_refused(name):
    source = attacks("/etc/passwd")[name]
    reason = check_directives(source)
    assert reason and "line" in reason
    assert scan_source(source) == reason


def test_the_refusal_names_the_directives_first_physical_line():
    refusal = find_forbidden_directive(KERNEL + "\n#include \\\n  <../x.h>\n")
    assert refusal.line == 3


@pytest.mark.parametrize("source", [
    "#include <cuda_fp16.h>\n#include <cstdint>\n#include <mma.h>\n" + KERNEL,
    "#include <cooperative_groups/reduce.h>\n#include <cuda/pipeline>\n#include <cub/cub.cuh>\n" + KERNEL,
    "  #  include   <cuda_bf16.h>\n" + KERNEL,
    '/* #include "/etc/passwd" is what an attacker would write */\n' + KERNEL,
    'const char* s = "#include \\"/etc/passwd\\"";\n' + KERNEL,
])
def test_toolkit_and_standard_headers_and_lookalikes_in_text_pass(source):
    assert check_directives(source) is None


def test_a_header_from_the_allowed_include_directory_passes(tmp_path, monkeypatch):
    (tmp_path / "cute").mkdir()
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "tile.hpp").write_text("// a header\n")
    monkeypatch.setenv("KERNELLAB_INCLUDE_DIR", str(tmp_path))
    assert check_directives("#include <mylib/tile.hpp>\n" + KERNEL) is None
    assert check_directives("#include <mylib/missing.hpp>\n" + KERNEL)


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not compiler._wheel_bins(),
                                reason="nvcc is not installed")


@needs_nvcc
def test_a_refused_source_never_reaches_nvcc(tmp_path, monkeypatch):
    def no_nvcc(*args, **kwargs):
        raise AssertionError("nvcc ran")

    monkeypatch.setattr(compiler.subprocess, "run", no_nvcc)
    monkeypatch.setattr(compiler, "nvcc_version", lambda: "13.0")
    report = compile_cubin(attacks(secret_file(tmp_path))["through a macro"], use_cache=False).report
    assert not report.ok and report.errors[0].line == 2 and "macro" in report.errors[0].message


@needs_nvcc
def test_inside_the_sandbox_the_hosts_files_do_not_exist(tmp_path, monkeypatch):
    if compile_sandbox._bwrap_works():
        pytest.skip(f"no compile sandbox here: {compile_sandbox._bwrap_works()}")
    monkeypatch.setenv("KERNELLAB_COMPILE_SANDBOX", "bwrap")
    monkeypatch.setattr(compiler, "find_forbidden_directive", lambda source: None)  # the sandbox alone
    for name in ("in a function body", "absolute"):
        report = compile_cubin(attacks(secret_file(tmp_path))[name], use_cache=False).report
        assert not report.ok
        assert SECRET not in report.log and all(SECRET not in d.message for d in report.diagnostics)
        assert "No such file" in report.log or "cannot open source file" in report.log
        assert any(d.line for d in report.errors)  # the refused include is shown on the user's line
    assert compile_cubin(KERNEL, use_cache=False, sass=False).report.ok


@needs_nvcc
def test_without_a_sandbox_messages_about_other_files_quote_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_COMPILE_SANDBOX", "none")
    monkeypatch.setattr(compiler, "find_forbidden_directive", lambda source: None)  # redaction alone
    report = compile_cubin(attacks(secret_file(tmp_path))["in a function body"], use_cache=False).report
    assert not report.ok
    assert SECRET not in report.log and all(SECRET not in d.message for d in report.diagnostics)
    assert any("included header" in d.message and d.line is None for d in report.diagnostics)


def test_redaction_keeps_the_submitted_files_messages_whole():
    log = ('kernel.cu(3): error: identifier "alpha" is undefined\n  y = alpha;\n      ^\n\n'
           f'/srv/data/secret.txt(1): error: identifier "{SECRET}" is undefined\n  {SECRET}\n  ^\n\n'
           "2 errors detected in the compilation of \"kernel.cu\".\n")
    redacted = redact_foreign(log)
    assert SECRET not in redacted and "/srv/data" not in redacted
    assert 'identifier "alpha" is undefined' in redacted and "y = alpha;" in redacted
    assert 'an included header: error: identifier "…" is undefined' in redacted


def test_cupys_own_name_for_the_submitted_source_is_not_redacted():
    log = ('/tmp/tmpn81gr221/152c3640196c2e2f0d08119320b25301d488a905.cubin.cu(5): error: identifier "INFINITY" '
           "is undefined\n")
    assert 'identifier "INFINITY" is undefined' in redact_foreign(log)
    assert compiler.parse_diagnostics(log)[0].line == 5


def test_the_sandbox_setting_is_checked():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELLAB_COMPILE_SANDBOX", "maybe")
        with pytest.raises(compile_sandbox.SandboxUnavailable, match="auto, bwrap or none"):
            compile_sandbox.sandbox_status()
