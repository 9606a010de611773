#!/bin/sh
# The example's build: sh build.sh <output-binary>, run from this directory.
# It writes nothing but the binary it is given.
set -eu
g++ -std=c++17 -O2 -Wall -Wextra -Werror -o "$1" src/main.cpp src/http/response.cpp
