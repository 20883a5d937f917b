// Compiled only to build the precompiled header of QEVAL_PCH (CMakeLists.txt); defines nothing.
