// Placeholder translation unit so the kernels library exists before its first op lands.
namespace qeval::kernels {
int kernels_library_marker = 0;
}
