from gpu_runner.hardware import nvml_index


def test_a_pinned_worker_reads_its_own_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert nvml_index(0) == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert nvml_index(1) == 5


def test_without_pinning_the_cuda_index_stands(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_index(1) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8c1f0b2e")  # a UUID: no index to map
    assert nvml_index(0) == 0
