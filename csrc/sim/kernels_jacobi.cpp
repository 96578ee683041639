// The cuda_sim build of csrc/jacobi.cu: the same launchers and kernels, compiled as host C++ over
// the SIMT emulation (SPECOPS_CUDA_SIM, the shim headers in csrc/sim/include) into specops::sim.
#include "../jacobi.cu"
