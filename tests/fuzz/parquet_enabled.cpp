// tasks/parquet.cpp and tasks/parquet_writer.cpp with Parquet on, for the parquet fuzz target (scripts/fuzz.sh): the
// other targets link the same source without Arrow (its stubs), and the two builds need objects of their own.
#define PPO_WITH_PARQUET 1
#include "tasks/parquet.cpp"
#include "tasks/parquet_writer.cpp"
