// CoreDNS with only the plugins the local cluster's DNS uses (hack/real-nodes.sh).
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
)

func init() {
	// The order plugins run in, as CoreDNS's plugin.cfg has them.
	dnsserver.Directives = []string{"bind", "errors", "kubernetes"}
}

func main() { coremain.Run() }
