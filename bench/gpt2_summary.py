#!/usr/bin/python3
"""The table of scripts/gpu-check.sh's bench-gpt2 step: GPT-2 small's shape
(configs/gpt2_small.json) trained by dtrain and by PyTorch on one device.

Reads JSON lines (stdin or a file), each one result with a "row" label added by
the script: "gemm bfloat16" / "gemm float32" (bench/torch_gpt_reference.py gemm),
"dtrain float32" / "dtrain mixed_bfloat16" (dtrain bench train --json), "torch
eager float32", "torch eager bf16+flash", "torch compile bf16"
(torch_gpt_reference.py train). Prints one line per row: tokens/s, achieved
TFLOP/s, MFU against the device's dense datasheet peak for the row's products
(dtrain's table, utilization.h; the measured GEMM where the table has none),
the share of the measured peak GEMM, and peak memory; then the ratios the issue
asks for, and a last "DETAIL: " line for the check's table.

Every row's FLOPs are dtrain's model_flops_per_token (6N + 12LdT, PaLM's), the
same model on both sides (torch's own count is printed beside it as a check).
"""
import json
import sys


def main():
    rows = {}
    for line in (open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            rows[r.get("row", "?")] = r
    d32, dbf = rows.get("dtrain float32", {}), rows.get("dtrain mixed_bfloat16", {})
    flops = dbf.get("model_flops_per_token") or d32.get("model_flops_per_token") or 0
    peaks = {"float32": d32.get("peak_tflops", 0), "bfloat16": dbf.get("peak_tflops", 0)}
    measured = {"float32": rows.get("gemm float32", {}).get("tflops", 0),
                "bfloat16": rows.get("gemm bfloat16", {}).get("tflops", 0)}
    for dtype in peaks:
        if not peaks[dtype]:
            peaks[dtype] = measured[dtype]
    device = dbf.get("device") or d32.get("device") or "?"
    names = {r.get("device") for r in rows.values() if r.get("framework") == "pytorch"}
    print(f"GPT-2 small shape on {device} ({', '.join(sorted(n for n in names if n))}); "
          f"{flops / 1e9:.3f} GFLOP a token (6N + 12LdT)")
    print(f"peak: float32 {peaks['float32']:.1f}, bfloat16 {peaks['bfloat16']:.1f} TFLOP/s "
          f"({dbf.get('peak_source') or d32.get('peak_source') or 'measured GEMM'}); measured GEMM: "
          f"float32 {measured['float32']:.1f}, bfloat16 {measured['bfloat16']:.1f} TFLOP/s")
    print(f"{'row':26} {'tokens/s':>10} {'TFLOP/s':>9} {'MFU':>7} {'of GEMM':>8} {'peak GiB':>9}")
    rates = {}
    for name in ("dtrain float32", "torch eager float32", "dtrain mixed_bfloat16", "torch eager bf16+flash",
                 "torch compile bf16"):
        r = rows.get(name)
        if not r:
            print(f"{name:26} {'(no result)':>10}")
            continue
        rate = r.get("tokens_per_sec", 0)
        rates[name] = rate
        dtype = "float32" if "float32" in name else "bfloat16"
        achieved = rate * flops / 1e12
        mfu = achieved / peaks[dtype] if peaks[dtype] else 0
        of_gemm = achieved / measured[dtype] if measured[dtype] else 0
        memory = r.get("peak_memory_bytes", 0) / 2 ** 30
        own = r.get("model_flops_per_token")
        check = f"  (its own count {own / 1e9:.3f} GFLOP)" if own and flops and abs(own - flops) > 1e-6 * flops else ""
        print(f"{name:26} {rate:10.0f} {achieved:9.2f} {100 * mfu:6.1f}% {100 * of_gemm:7.1f}% {memory:9.2f}{check}")

    def ratio(a, b):
        return rates.get(a, 0) / rates[b] if rates.get(b) else 0

    ratios = {"bf16 vs torch.compile": ratio("dtrain mixed_bfloat16", "torch compile bf16"),
              "bf16 vs eager bf16+flash": ratio("dtrain mixed_bfloat16", "torch eager bf16+flash"),
              "f32 vs eager f32": ratio("dtrain float32", "torch eager float32")}
    print("dtrain / pytorch: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    bf_mfu = rates.get("dtrain mixed_bfloat16", 0) * flops / 1e12 / peaks["bfloat16"] if peaks["bfloat16"] else 0
    print(f"DETAIL: gpt2-small on {device}: dtrain bf16 {rates.get('dtrain mixed_bfloat16', 0):.0f} tok/s "
          f"(MFU {100 * bf_mfu:.1f}%), f32 {rates.get('dtrain float32', 0):.0f}; torch compile bf16 "
          f"{rates.get('torch compile bf16', 0):.0f}, eager bf16+flash {rates.get('torch eager bf16+flash', 0):.0f}, "
          f"eager f32 {rates.get('torch eager float32', 0):.0f}; " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    return 0 if rates.get("dtrain mixed_bfloat16") and rates.get("dtrain float32") else 1


if __name__ == "__main__":
    sys.exit(main())
