#!/usr/bin/env python3
"""scripts/kernel_profile.py on a small CSV in Nsight Compute's own shape: the profiler's
preamble, a units row, its spelling of anonymous namespaces, and kernels before the first step."""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_profile.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import kernel_profile  # noqa: E402

CSV = """==PROF== Connected to process 1 (q38-bench-model)
TP  prefill tok/s (median)  decode tok/s (median)  TPOT ms
==PROF== Disconnected from process 1
"ID","Process ID","Kernel Name","Grid Size","gpu__time_duration.sum"
"","","","","ns"
"0","1","q38::cuda::unnamed>::FillRandomKernel(void *, RandomKind, unsigned long, float, long)","(64, 1, 1)","900000"
"1","1","q38::cuda::unnamed>::EmbedStreamsKernel(const __half *, const int *, float *, long, long, long)","(1, 1, 1)","2000"
"2","1","void q38::cuda::unnamed>::GateUpKernel<q38::cuda::unnamed>::Nvfp4Rows>(const __half *, T1)","(10, 1, 1)","30,000"
"3","1","void q38::cuda::unnamed>::GemvKernel<true>(const __half *, const __half *, __half *, int, long, long)","(1280, 1, 1)","8000"
"4","1","q38::cuda::unnamed>::EmbedStreamsKernel(const __half *, const int *, float *, long, long, long)","(1, 1, 1)","2000"
"5","1","void q38::cuda::unnamed>::GateUpKernel<q38::cuda::unnamed>::Nvfp4Rows>(const __half *, T1)","(10, 1, 1)","10000"
"6","1","void q38::cuda::unnamed>::GemvKernel<true>(const __half *, const __half *, __half *, int, long, long)","(324, 1, 1)","8000"
"""


class KernelProfile(unittest.TestCase):
    def run_script(self, text, *args):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(text)
        try:
            return subprocess.run([sys.executable, SCRIPT, f.name, *args], capture_output=True, text=True)
        finally:
            os.unlink(f.name)

    def test_names_lose_namespaces_and_keep_template_arguments(self):
        self.assertEqual(kernel_profile.short(
            "void q38::cuda::unnamed>::GateUpKernel<q38::cuda::unnamed>::Nvfp4Rows>(const __half *, T1)"),
            "GateUpKernel<Nvfp4Rows>")
        self.assertEqual(kernel_profile.short("q38::cuda::(anonymous namespace)::AddKernel(float *)"), "AddKernel")

    def test_sums_per_step_from_the_first_marker(self):
        p = self.run_script(CSV, "--step_marker", "EmbedStreams")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        # Two steps of 3 kernels; the weight fill before the first step is left out.
        self.assertEqual(lines[0], "2 steps, 3 kernels and 0.03 ms of kernel time per step")
        rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
        self.assertEqual(rows["GateUpKernel<Nvfp4Rows>"], ["1.0", "20.0", "66.7%"])
        self.assertEqual(rows["GemvKernel<true>"], ["1.0", "8.0", "26.7%"])
        self.assertNotIn("FillRandomKernel", rows)

    def test_keeps_one_step_of_each_run(self):
        # Steps alternate: even ones hold the 30 µs GateUp, odd ones the 10 µs one.
        p = self.run_script(CSV, "--step_marker", "EmbedStreams", "--period", "2", "--pick", "0")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines()[0], "1 steps, 3 kernels and 0.04 ms of kernel time per step")
        p = self.run_script(CSV, "--step_marker", "EmbedStreams", "--period", "2", "--pick", "1")
        self.assertEqual(p.stdout.splitlines()[0], "1 steps, 3 kernels and 0.02 ms of kernel time per step")
        self.assertNotEqual(self.run_script(CSV, "--step_marker", "EmbedStreams", "--period", "2",
                                            "--pick", "2").returncode, 0)

    def test_splits_one_kernel_by_grid_size(self):
        p = self.run_script(CSV, "--step_marker", "EmbedStreams", "--by_grid", "GemvKernel")
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()[2:]}
        self.assertEqual(rows["GemvKernel<true>[1280,1,1]"], ["0.5", "4.0", "13.3%"])
        self.assertEqual(rows["GemvKernel<true>[324,1,1]"], ["0.5", "4.0", "13.3%"])
        self.assertEqual(rows["GateUpKernel<Nvfp4Rows>"], ["1.0", "20.0", "66.7%"])  # not split

    def test_refuses_a_file_without_the_header_or_the_marker(self):
        self.assertNotEqual(self.run_script("not a profile\n", "--step_marker", "X").returncode, 0)
        p = self.run_script(CSV, "--step_marker", "NoSuchKernel")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no NoSuchKernel kernel", p.stderr)


if __name__ == "__main__":
    unittest.main()
