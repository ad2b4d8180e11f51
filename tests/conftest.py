from hypothesis import settings

# The first example pays for importing scipy; wall-clock deadlines only add flakiness.
settings.register_profile("perfsuite", deadline=None)
settings.load_profile("perfsuite")
