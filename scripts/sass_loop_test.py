#!/usr/bin/env python3
"""scripts/sass_loop.py on SASS text in cuobjdump's shape: two kernels, a loop with a tensor-core
instruction and a bounds-checked branch inside, a loop without one, predicated instructions."""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sass_loop.py")

SASS = """
\tcode for sm_90
\t\tFunction : _Z4TileILi64EEvPf
\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   MOV R1, c[0x0][0x28] ;                       /* 0x00000a0000017a02 */
        /*0010*/                   S2R R0, SR_TID.X ;                           /* 0x0000000000007919 */
        /*0020*/                   ISETP.GE.AND P0, PT, R0, 0x40, PT ;          /* 0x000000400000780c */
        /*0030*/              @P0 BRA 0x70 ;                                   /* 0x0000000000008947 */
        /*0040*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;    /* 0x0000000402047981 */
        /*0050*/                   BRA 0x90 ;                                   /* 0x0000000000007947 */
        /*0060*/                   NOP ;                                        /* 0x0000000000007918 */
        /*0070*/                   IMAD.MOV.U32 R4, RZ, RZ, RZ ;                /* 0x000000ffff047224 */
        /*0080*/              @!P1 LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;    /* 0x0000000402049981 */
        /*0090*/                   HMMA.16816.F32 R8, R4, R6, R8 ;              /* 0x000000060408723c */
        /*00a0*/                   HMMA.16816.F32 R12, R4, R7, R12 ;            /* 0x000000070c0c723c */
        /*00b0*/                   STS.128 [R3], R4 ;                           /* 0x0000000403007388 */
        /*00c0*/                   IADD3 R0, R0, 0x1, RZ ;                      /* 0x0000000100007810 */
        /*00d0*/              @P2 BRA 0x20 ;                                   /* 0x0000000000002947 */
        /*00e0*/                   EXIT ;                                       /* 0x000000000000794d */
\t\t..........

\t\tFunction : _Z4CopyPf
\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDG.E R2, desc[UR4][R4.64] ;                 /* 0x0000000404027981 */
        /*0010*/                   STG.E desc[UR4][R6.64], R2 ;                 /* 0x0000000206007986 */
        /*0020*/                   IADD3 R4, R4, 0x4, RZ ;                      /* 0x0000000404047810 */
        /*0030*/              @P0 BRA 0x0 ;                                    /* 0x0000000000000947 */
        /*0040*/                   EXIT ;                                       /* 0x000000000000794d */
\t\t..........
"""

RES = """Resource usage:
 Function _Z4TileILi64EEvPf:
  REG:96 STACK:16 SHARED:0 LOCAL:0 CONSTANT[0]:560 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z4CopyPf:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:560 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


class SassLoop(unittest.TestCase):
    def run_script(self, *args):
        with tempfile.TemporaryDirectory() as d:
            sass, res = os.path.join(d, "k.sass"), os.path.join(d, "k.res")
            with open(sass, "w") as f:
                f.write(SASS)
            with open(res, "w") as f:
                f.write(RES)
            return subprocess.run([sys.executable, SCRIPT, "--sass_text", sass, "--res_text", res, *args],
                                  capture_output=True, text=True)

    def counts(self, out):
        return {w[0]: int(w[1]) for w in (line.split() for line in out.splitlines())
                if len(w) == 2 and w[0].isupper() and w[1].isdigit()}

    def test_counts_the_tensor_core_loop_by_opcode(self):
        p = self.run_script("Tile")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("REG:96 STACK:16", p.stdout)
        c = self.counts(p.stdout)
        # 0x20..0xd0: 12 instructions; predicates and modifiers dropped.
        self.assertEqual(c["HMMA"], 2)
        self.assertEqual(c["LDG"], 2)
        self.assertEqual(c["BRA"], 3)
        self.assertEqual(c["IMAD"], 1)
        self.assertNotIn("EXIT", c)
        self.assertNotIn("S2R", c)
        self.assertRegex(p.stdout, r"loop +12\n")

    def test_splits_the_loop_into_blocks(self):
        p = self.run_script("Tile")
        blocks = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("block")]
        self.assertEqual(blocks, [
            "block 0x0020: 2 (0 HMMA, 0 LDG, 0 STS)",   # the bound check, ending at its branch
            "block 0x0040: 2 (0 HMMA, 1 LDG, 0 STS)",   # the whole load, then the jump past the tail
            "block 0x0060: 1 (0 HMMA, 0 LDG, 0 STS)",
            "block 0x0070: 2 (0 HMMA, 1 LDG, 0 STS)",   # the bounded load (a branch lands here)
            "block 0x0090: 5 (2 HMMA, 0 LDG, 1 STS)",   # the products and the back edge
        ])

    def test_a_loop_without_tensor_cores_needs_any(self):
        p = self.run_script("Copy")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("no loop with an HMMA", p.stdout)
        p = self.run_script("Copy", "--any")
        self.assertEqual(self.counts(p.stdout), {"LDG": 1, "STG": 1, "IADD3": 1, "BRA": 1})
        self.assertRegex(p.stdout, r"loop +4\n")

    def test_refuses_a_name_that_matches_nothing(self):
        p = self.run_script("NoSuchKernel")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no kernel matches NoSuchKernel", p.stderr)


if __name__ == "__main__":
    unittest.main()
