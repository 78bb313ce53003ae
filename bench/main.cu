// main() of each benchmark executable and of tessel-bench (every family linked together). A .cu
// file: the ceilings it measures first (harness.hpp) fill their inputs with a kernel.
#include "bench_main.hpp"

int main(int argc, char** argv) { return tessel::bench::run_benchmarks(argc, argv); }
