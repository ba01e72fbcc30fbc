// Compiled into each executable of a GPT2VK_SANITIZE build: the sanitizers' default options
// (the runtimes call these hooks at start-up; ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS still
// override them), and a dlclose that keeps libraries loaded.

extern "C" {

// Any report ends the run with a non-zero exit; leaks are checked at exit.
const char* __asan_default_options() {
  return "detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:"
         "check_initialization_order=1:strict_init_order=1";
}

// -fno-sanitize-recover=all already makes UB fatal; the stack says where it came from.
const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1";
}

// The suppressions' statistics would follow a command's error line on stderr, where the tests
// read a command's last line; what is suppressed is said below.
const char* __lsan_default_options() {
  return "print_suppressions=0";
}

// Allocations made by the Vulkan loader, Mesa's lavapipe (with its LLVM) and the Khronos
// validation layer are not reported as leaks: over the whole test suite LSan finds ~66,000 of
// lavapipe's (86 MB) and ~22,000 of the layer's (3 MB) unreachable at exit. Whether they are
// leaks or pointers kept where LSan does not look (memory a driver maps itself), they are not
// ours to fix. These libraries are built without frame pointers, so their allocations' stacks
// end at their own frame, and a suppression by library is all that can be said. What it
// hides: a Vulkan object we forget to destroy (its memory is the driver's), and an allocation
// of ours made inside the validation layer's callback. The layer's object tracker reports an
// undestroyed object when its device is destroyed: a validation message, which fails the GPU
// test that owns the device (for the device the tests share, destroyed at exit, it is printed
// on stderr). Every other allocation of ours is checked: a leak fails the run (ctest's
// sanitizer_reports_leak).
const char* __lsan_default_suppressions() {
  return "leak:libvulkan.so\n"
         "leak:libvulkan_lvp.so\n"
         "leak:libLLVM\n"
         "leak:libVkLayer_khronos_validation.so\n";
}

// The loader unloads the driver and the layer at vkDestroyInstance, before LeakSanitizer runs at
// exit, and a leak from an unloaded library shows as "<unknown module>": it could be neither
// suppressed by name nor read. Keeping every library loaded until exit costs nothing in a test
// run and names them.
int dlclose(void*) {
  return 0;
}

}  // extern "C"
