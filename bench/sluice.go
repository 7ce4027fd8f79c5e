package bench

// SluiceContenders returns sluice's in-process stores.
func SluiceContenders() []Contender { return nil }

// SluiceRedisContenders returns sluice's Redis store modes.
func SluiceRedisContenders() []RedisContender { return nil }
