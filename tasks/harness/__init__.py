"""The load generator side: loadgen driven in a child process, the streaming SUT, request builders, data set readers."""
