package kongplugin

// len returns the number of cached entries.
func (c *compiledCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
