# Test-only schema: a self-similar struct for nesting-depth bombs.
@0xdb26a1d49b50d626;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("hart::wire_test");

struct Nest {
  child @0 :Nest;
}
