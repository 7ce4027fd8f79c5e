// Package deploytest checks the deployment files in deploy/: the Helm chart
// is rendered with the Helm SDK and checked, the systemd units pass
// systemd-analyze verify. It is a module of its own so that Helm's
// dependencies never enter sluice's.
package deploytest
