"""Activations are sized for the window actually run, not for the context the config claims
(issue 12, class 5): a GPT-2 with a 262144-token context and 64 channels would need 805 MB of
activations for n_ctx; a 16-token capture runs under a 600 MB address-space limit (RLIMIT_AS,
which counts what is allocated even if never touched; the code before issue 12 fails it with
"out of memory allocating 805306368 bytes for GPT-2 activations")."""
import os
import resource
import subprocess

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    raise RuntimeError("run through ctest (ATTNLIM_BIN unset)")


def test_long_context_short_window(tmp_path):
    m = tmp_path / "m"
    subprocess.run([BIN, "make-model", "--layers", "1", "--heads", "2", "--embd", "64", "--ctx", "262144",
                    "--vocab", "50257", "--out", str(m)], check=True, capture_output=True)
    (tmp_path / "ids.txt").write_text(" ".join(str(i) for i in range(16)))

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (600 << 20, 600 << 20))

    if os.environ.get("LD_PRELOAD"):  # the sanitizer runtimes reserve terabytes of shadow memory
        limit = None
    r = subprocess.run([BIN, "capture", "--model", str(m), "--tokens", str(tmp_path / "ids.txt"),
                        "--length", "16", "--what", "weights", "--threads", "1", "--out", str(tmp_path / "cap")],
                       capture_output=True, text=True, preexec_fn=limit,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "cap")) == ["layer0.weights.npy", "manifest.json"]
