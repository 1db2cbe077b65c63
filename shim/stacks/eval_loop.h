// Where the interpreter's eval loop runs, where its symbol does not say (shim/python/frames.h). Internal
// to the stacks module.
#pragma once
#include <cstdint>

namespace gg::stacks {

// Called by a capture that read Python frames, on the slow path: for the first few such captures of
// the process (eval_loop.cpp), finds the native frame that holds the innermost eval-loop run's entry frame and, where
// its return address lies outside every range is_eval_loop() knows, adds the code range around it.
void learn_eval_loop();

// The return address into the native frame whose locals hold `address` (a stack address of this
// thread's), 0 where the walk does not reach past that frame. Its part of learn_eval_loop(), for tests.
uintptr_t return_address_into_frame_holding(uintptr_t address);

}  // namespace gg::stacks
