// A shared library that is in no bundle: the bundle test preloads it into the workers, whose
// coordinator must then refuse them.
extern "C" int q38_test_preload_marker() { return 38; }
