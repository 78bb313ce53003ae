// main() of each benchmark executable and of tessel-bench (every family linked together).
#include "bench_main.hpp"

int main(int argc, char** argv) { return tessel::bench::run_benchmarks(argc, argv); }
