// Command pause is the pod sandbox's process, as registry.k8s.io/pause is: it
// holds the pod's namespaces open, reaps orphaned children and exits on
// SIGINT or SIGTERM. Built here because the local cluster has no registry to
// pull the upstream image from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// As PID 1 of a shared PID namespace it inherits orphans: reap them all.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
