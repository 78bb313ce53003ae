// Tests of tessel::Layout (shape, strides, views). Written in a later step.
#include <catch2/catch.hpp>
