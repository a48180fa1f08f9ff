"""A bundle revision on the bus: published, and its status followed.

- ``publish`` — publishing a bundle revision (``publish_bundle``); its manifests inline or in the
  Object Store.
- ``watch`` — following one bundle's status as a user sees it, with a deadline.
"""
